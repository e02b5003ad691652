package server

import (
	"context"
	"fmt"

	"github.com/sirupsen/logrus"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemoveImage removes an image unless a container uses it. Removing an image
// that is not there succeeds: the CRI makes removal idempotent. A pinned
// image is removed too, as containerd does: pinning keeps it from the
// kubelet's garbage collection, which never asks; whoever asks by name
// (crictl rmi) means it. It is pinned again when pulled again.
func (s *Server) RemoveImage(ctx context.Context, req *runtime.RemoveImageRequest) (*runtime.RemoveImageResponse, error) {
	ref, err := requestedImage(req.GetImage())
	if err != nil {
		return nil, toStatus(err)
	}
	if img, err := s.images.Get(ref); err == nil && s.pinned.Has(img) {
		s.log.WithFields(logrus.Fields{"image": ref, "id": img.ID}).Info("removing a pinned image (image.pinned_images), as asked")
	}
	if err := s.images.Remove(ref); err != nil {
		return nil, toStatus(fmt.Errorf("remove image %q: %w", ref, err))
	}
	return &runtime.RemoveImageResponse{}, nil
}
