package server

import (
	"context"
	"errors"
	"fmt"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/store"
)

// RemoveContainer removes a container, killing it first if it runs. Its log
// file stays: it belongs to the kubelet. Removing an unknown container
// succeeds.
func (s *Server) RemoveContainer(ctx context.Context, req *runtime.RemoveContainerRequest) (*runtime.RemoveContainerResponse, error) {
	id, err := s.resolveContainer("container_id", req.GetContainerId())
	if errors.Is(err, store.ErrNotFound) {
		return &runtime.RemoveContainerResponse{}, nil
	}
	if err != nil {
		return nil, toStatus(err)
	}
	if err := s.removeContainer(ctx, id); err != nil {
		return nil, toStatus(fmt.Errorf("remove container %s: %w", id, err))
	}
	return &runtime.RemoveContainerResponse{}, nil
}

// removeContainer takes the container's lock, so a caller may hold its
// sandbox's lock but not the container's.
func (s *Server) removeContainer(ctx context.Context, id string) error {
	c, unlock := s.lockCtr(id)
	defer unlock()
	if err := s.stopContainer(ctx, id, 0); err != nil {
		return err
	}
	lifecycle.CrashPoint("container-remove-after-stop")
	rec, err := s.containers.Get(id)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := s.discardContainer(ctx, rec); err != nil {
		return err
	}
	s.containerNames.Release(rec.Name, id)
	_ = s.transition(ctx, c, rec, removed)
	return nil
}

// containersOf lists the containers of a sandbox.
func (s *Server) containersOf(sandboxID string) []lifecycle.ContainerRecord {
	var out []lifecycle.ContainerRecord
	for _, c := range s.containers.List() {
		if c.SandboxID == sandboxID {
			out = append(out, c)
		}
	}
	return out
}
