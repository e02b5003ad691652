package server

import (
	"context"
	"fmt"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/image"
)

// PullImage pulls an image (with the kubelet's credentials, if any) and
// answers its ID. An image already present is pulled again: the tag may have
// moved, and the blobs that did not change are not downloaded twice.
func (s *Server) PullImage(ctx context.Context, req *runtime.PullImageRequest) (*runtime.PullImageResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, toStatus(invalidf("image.image", "must name an image"))
	}
	if err := validatePrintable("image.image", ref); err != nil {
		return nil, toStatus(err)
	}
	img, err := s.images.Pull(ctx, ref, pullAuth(req.GetAuth()))
	if err != nil {
		return nil, toStatus(fmt.Errorf("pull image %q: %w", ref, err))
	}
	return &runtime.PullImageResponse{ImageRef: img.ID}, nil
}

func pullAuth(a *runtime.AuthConfig) *image.Auth {
	if a == nil {
		return nil
	}
	return &image.Auth{
		Username:      a.GetUsername(),
		Password:      a.GetPassword(),
		Auth:          a.GetAuth(),
		IdentityToken: a.GetIdentityToken(),
		RegistryToken: a.GetRegistryToken(),
	}
}
