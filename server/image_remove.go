package server

import (
	"context"
	"fmt"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemoveImage removes an image unless a container uses it. Removing an image
// that is not there succeeds: the CRI makes removal idempotent.
func (s *Server) RemoveImage(ctx context.Context, req *runtime.RemoveImageRequest) (*runtime.RemoveImageResponse, error) {
	ref, err := requestedImage(req.GetImage())
	if err != nil {
		return nil, toStatus(err)
	}
	if err := s.images.Remove(ref); err != nil {
		return nil, toStatus(fmt.Errorf("remove image %q: %w", ref, err))
	}
	return &runtime.RemoveImageResponse{}, nil
}
