package server

import (
	"context"
	"errors"

	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/store"
)

// Each sandbox and container has a lock of its own, in its object
// (objects.go), that serialises the calls that change it: the kubelet may
// retry a StopContainer while the first is still running, and
// RemovePodSandbox may race a StopContainer of one of its containers. Locks
// of different objects never wait for each other.
//
// The lock discipline of the server: take an object's lock before its
// record's read-modify-write and before acting on its resources; a sandbox
// lock may be held while taking a container lock, never the other way round;
// an object's mu and the store tables' own locks (which guard the objects'
// records and the tables' maps of objects) are held only briefly, never
// across a runtime call.

// lockCtr takes the lock of container id and returns its unlock.
func (s *Server) lockCtr(id string) (*container, func()) {
	c := s.ctr(id)
	c.lock.Lock()
	return c, c.lock.Unlock
}

// lockPod takes the lock of sandbox id and returns its unlock.
func (s *Server) lockPod(id string) (*sandbox, func()) {
	sb := s.pod(id)
	sb.lock.Lock()
	return sb, sb.lock.Unlock
}

// lockContainer is lookupContainer under the container's lock, for the
// handlers that change it; the caller calls unlock once done. The record is
// read after the lock is taken, so it is not one a concurrent call changed.
func (s *Server) lockContainer(id string) (_ lifecycle.ContainerRecord, unlock func(), _ error) {
	full, err := s.resolveContainer("container_id", id)
	if err != nil {
		return lifecycle.ContainerRecord{}, nil, err
	}
	_, unlock = s.lockCtr(full)
	rec, err := s.containers.Get(full)
	if err != nil {
		unlock()
		return lifecycle.ContainerRecord{}, nil, err
	}
	return rec, unlock, nil
}

// lockSandbox resolves the sandbox a stop or remove names, takes its lock
// and starts the call's phase timer; done observes the timer and unlocks.
func (s *Server) lockSandbox(ctx context.Context, op, id string) (_ context.Context, full string, done func(), _ error) {
	full, err := s.resolveSandbox("pod_sandbox_id", id)
	if err != nil {
		return ctx, "", nil, err
	}
	_, unlock := s.lockPod(full)
	ctx, phases := lifecycle.WithPhases(ctx, s.metrics, op)
	return ctx, full, func() {
		phases.Observe()
		unlock()
	}, nil
}

// underSandboxLock runs step, a stop or remove of the sandbox id, under the
// sandbox's lock and its phase timer, and maps its error to a gRPC status.
// An unknown sandbox needs no stop or removal: the CRI makes both
// idempotent, and the kubelet repeats them until they succeed.
func (s *Server) underSandboxLock(ctx context.Context, op, id string, step func(ctx context.Context, full string) error) error {
	ctx, full, done, err := s.lockSandbox(ctx, op, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return toStatus(err)
	}
	defer done()
	return toStatus(step(ctx, full))
}
