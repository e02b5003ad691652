package server

import (
	"context"
	"fmt"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopPodSandbox stops every container of the pod and releases its network
// and namespaces (podsandbox.Controller.Stop). It succeeds for a sandbox
// that is already stopped or gone: the kubelet calls it again and again
// until it does.
func (s *Server) StopPodSandbox(ctx context.Context, req *runtime.StopPodSandboxRequest) (*runtime.StopPodSandboxResponse, error) {
	err := s.underSandboxLock(ctx, "StopPodSandbox", req.GetPodSandboxId(), func(ctx context.Context, id string) error {
		rec, wasReady, err := s.pods.Stop(ctx, id)
		if err != nil {
			return fmt.Errorf("stop pod sandbox %s: %w", id, err)
		}
		if wasReady {
			s.podTransition(ctx, s.pod(id), rec, stopped)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &runtime.StopPodSandboxResponse{}, nil
}
