package server

import (
	"context"
	"fmt"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/server/validate"
)

// PullImage pulls an image (with the kubelet's credentials, if any) and
// answers its ID. An image already present is pulled again: the tag may have
// moved, and the blobs that did not change are not downloaded twice.
func (s *Server) PullImage(ctx context.Context, req *runtime.PullImageRequest) (*runtime.PullImageResponse, error) {
	ref, err := s.pullTarget(req.GetImage())
	if err != nil {
		return nil, toStatus(err)
	}
	// The pod's namespace picks its signature_policy_dir file: only a
	// DNS-1123 label (what Kubernetes allows) may name one.
	ns := req.GetSandboxConfig().GetMetadata().GetNamespace()
	if ns != "" && !image.ValidNamespace(ns) {
		return nil, toStatus(validate.Invalidf("sandbox_config.metadata.namespace", "%q is not a DNS-1123 label", ns))
	}
	start := time.Now()
	img, err := s.images.PullForNamespace(ctx, ref, pullAuth(req.GetAuth()), ns)
	s.metrics.ObservePull(img.Size, err, time.Since(start))
	if err != nil {
		return nil, pullStatus(fmt.Errorf("pull image %q: %w", ref, err))
	}
	return &runtime.PullImageResponse{ImageRef: img.ID}, nil
}

// pullTarget is the reference a pull asks for, checked. One image store
// serves every handler, yet an unknown handler is refused, as the CRI asks.
func (s *Server) pullTarget(spec *runtime.ImageSpec) (string, error) {
	ref, err := validate.RequestedImage(spec)
	if err != nil {
		return "", err
	}
	if h := spec.GetRuntimeHandler(); h != "" {
		if _, err := s.handlerName(h); err != nil {
			return "", validate.Invalidf("image.runtime_handler", "no runtime handler %q is configured", h)
		}
	}
	return ref, nil
}

// pullStatus is toStatus for pulls. What has no code of its own (a bad
// certificate, a refused layer, a registry's odd answer) is a failure of
// the image or the registry, not of minicri: Unknown, not Internal; the
// kubelet's client then shows the message without a code in the pod's events.
func pullStatus(err error) error {
	if err == nil {
		return nil
	}
	return toStatus(&markedError{msg: err.Error(), errs: []error{err, errPull}})
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
