package server

import (
	"context"
	"errors"
	"sync"

	"github.com/minicri/minicri/store"
)

// keyedLocks serialises the calls that change one object (a sandbox or a
// container): the kubelet may retry a StopContainer while the first is still
// running, and RemovePodSandbox may race a StopContainer of one of its
// containers. Locks of different keys never wait for each other.
//
// The lock discipline of the server: take an object's lock before its
// record's read-modify-write and before acting on its resources; a sandbox
// lock may be held while taking a container lock, never the other way round;
// the store tables' own locks are held only inside one store call.
type keyedLocks struct {
	mu    sync.Mutex
	locks map[string]*refLock
}

type refLock struct {
	sync.Mutex
	refs int
}

func newKeyedLocks() *keyedLocks { return &keyedLocks{locks: map[string]*refLock{}} }

// lock takes the lock of key and returns its unlock.
func (k *keyedLocks) lock(key string) (unlock func()) {
	k.mu.Lock()
	l, ok := k.locks[key]
	if !ok {
		l = &refLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()

	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// lockContainer is lookupContainer under the container's lock, for the
// handlers that change it; the caller calls unlock once done. The record is
// read after the lock is taken, so it is not one a concurrent call changed.
func (s *Server) lockContainer(id string) (_ containerRecord, unlock func(), _ error) {
	full, err := s.resolveContainer("container_id", id)
	if err != nil {
		return containerRecord{}, nil, err
	}
	unlock = s.locks.lock(full)
	rec, err := s.containers.Get(full)
	if err != nil {
		unlock()
		return containerRecord{}, nil, err
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
	unlock := s.locks.lock(full)
	ctx, phases := s.withPhases(ctx, op)
	return ctx, full, func() {
		phases.observe()
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
