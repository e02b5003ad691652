package server

import "sync"

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
