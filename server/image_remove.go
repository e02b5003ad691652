package server

import (
	"context"
	"fmt"

	"github.com/sirupsen/logrus"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/validate"
)

// RemoveImage removes an image unless a container uses it. Removing an image
// that is not there succeeds: the CRI makes removal idempotent. A pinned
// image is removed too, as containerd does: pinning keeps it from the
// kubelet's garbage collection, which never asks for a pinned image;
// whoever does (crictl rmi) means it. It is pinned again when pulled again.
func (s *Server) RemoveImage(ctx context.Context, req *runtime.RemoveImageRequest) (*runtime.RemoveImageResponse, error) {
	ref, err := validate.RequestedImage(req.GetImage())
	if err != nil {
		return nil, toStatus(err)
	}
	s.logPinnedRemoval(ref)
	if err := s.images.Remove(ref); err != nil {
		return nil, toStatus(fmt.Errorf("remove image %q: %w", ref, err))
	}
	return &runtime.RemoveImageResponse{}, nil
}

// logPinnedRemoval says that a pinned image goes, so that an operator who
// misses it finds that it was asked for.
func (s *Server) logPinnedRemoval(ref string) {
	pinned := s.pinnedImages()
	if len(pinned) == 0 {
		return
	}
	if img, err := s.images.Get(ref); err == nil && pinned.Has(img) {
		s.log.WithFields(logrus.Fields{"image": ref, "id": img.ID}).Info("removing a pinned image (image.pinned_images), as asked")
	}
}
