package server

import (
	"context"
	"fmt"
	"io"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/validate"
	"github.com/minicri/minicri/streaming"
)

// PortForward validates the request and answers with a single-use URL that
// forwards connections to ports of the pod's network namespace.
func (s *Server) PortForward(ctx context.Context, req *runtime.PortForwardRequest) (*runtime.PortForwardResponse, error) {
	for _, p := range req.GetPort() {
		if p <= 0 || p > 65535 {
			return nil, toStatus(validate.Invalidf("port", "%d is not a port (1-65535)", p))
		}
	}
	sb, err := s.readySandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, toStatus(err)
	}
	url, err := s.streams.PortForwardURL(streaming.PortForwardRequest{SandboxID: sb.ID, Ports: req.GetPort()})
	if err != nil {
		return nil, toStatus(err)
	}
	return &runtime.PortForwardResponse{Url: url}, nil
}

// readySandbox returns a ready sandbox's record, or a status error.
func (s *Server) readySandbox(idOrPrefix string) (lifecycle.SandboxRecord, error) {
	sb, err := s.lookupSandbox(idOrPrefix)
	if err != nil {
		return lifecycle.SandboxRecord{}, fmt.Errorf("pod sandbox %.80q: %w", idOrPrefix, err)
	}
	if sb.State != lifecycle.StateReady {
		return lifecycle.SandboxRecord{}, sandboxNotReady(sb)
	}
	return sb, nil
}

func sandboxNotReady(sb lifecycle.SandboxRecord) error {
	return markf(errWrongState, "pod sandbox %s is not ready (%s)", sb.ID, sb.State)
}

// PortForward connects a streaming client's stream to localhost:port inside
// the pod's network namespace (the host's for a hostNetwork pod).
func (r streamRuntime) PortForward(ctx context.Context, sandboxID string, port int32, stream io.ReadWriteCloser) error {
	sb, err := r.s.readySandbox(sandboxID)
	if err != nil {
		return err
	}
	return streaming.ForwardPort(ctx, sb.Namespaces.Net, port, stream)
}
