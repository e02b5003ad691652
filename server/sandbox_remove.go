package server

import (
	"context"
	"errors"
	"fmt"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/store"
)

// RemovePodSandbox removes the pod's containers (forcibly when running), its
// resources and its record (podsandbox.Controller.Remove), and frees its
// name. Removing an unknown sandbox succeeds: the CRI makes removal
// idempotent.
func (s *Server) RemovePodSandbox(ctx context.Context, req *runtime.RemovePodSandboxRequest) (*runtime.RemovePodSandboxResponse, error) {
	if err := s.underSandboxLock(ctx, "RemovePodSandbox", req.GetPodSandboxId(), s.removePodSandbox); err != nil {
		return nil, err
	}
	return &runtime.RemovePodSandboxResponse{}, nil
}

// removePodSandbox is RemovePodSandbox under the sandbox's lock.
func (s *Server) removePodSandbox(ctx context.Context, id string) error {
	sb := s.pod(id) // taken while it is kept: the removal drops it
	rec, err := s.sandboxes.Get(id)
	if errors.Is(err, store.ErrNotFound) {
		return nil // removed while we waited for the lock
	}
	if err != nil {
		return err
	}
	if rec, err = s.pods.Remove(ctx, rec); err != nil {
		return fmt.Errorf("remove pod sandbox %s: %w", id, err)
	}
	s.sandboxNames.Release(rec.Name, id)
	s.podTransition(ctx, sb, rec, removed)
	return nil
}
