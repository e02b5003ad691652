package server

import (
	"context"
	"errors"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/image"
)

// imageStore is what the image handlers, and a container's create, need of
// the image store (*image.Store).
type imageStore interface {
	Get(ref string) (image.Image, error)
	List() []image.Image
	PullForNamespace(ctx context.Context, ref string, auth *image.Auth, namespace string) (image.Image, error)
	Remove(ref string) error
}

// ListImages lists the images, or only the one the filter names.
func (s *Server) ListImages(ctx context.Context, req *runtime.ListImagesRequest) (*runtime.ListImagesResponse, error) {
	if ref := req.GetFilter().GetImage().GetImage(); ref != "" {
		img, err := s.images.Get(ref)
		if errors.Is(err, image.ErrNotFound) {
			return &runtime.ListImagesResponse{}, nil
		}
		if err != nil {
			return nil, toStatus(err)
		}
		return &runtime.ListImagesResponse{Images: []*runtime.Image{s.criImage(img)}}, nil
	}
	images := s.images.List()
	out := make([]*runtime.Image, 0, len(images))
	for _, img := range images {
		out = append(out, s.criImage(img))
	}
	return &runtime.ListImagesResponse{Images: out}, nil
}
