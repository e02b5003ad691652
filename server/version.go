package server

import (
	"context"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runtimeAPIVersion is the CRI version minicri serves.
const runtimeAPIVersion = "v1"

// Version names the runtime and the CRI version it speaks. The request's
// version field is informational: the kubelet sends its own, and v1 is the
// only one served.
func (s *Server) Version(ctx context.Context, req *runtime.VersionRequest) (*runtime.VersionResponse, error) {
	return &runtime.VersionResponse{
		Version:           "0.1.0",
		RuntimeName:       RuntimeName,
		RuntimeVersion:    s.version,
		RuntimeApiVersion: runtimeAPIVersion,
	}, nil
}
