package image

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// ErrNotMeasured: a container's writable layer has not been measured yet;
// its figures are unknown (not zero) until the walk under way ends.
var ErrNotMeasured = errors.New("writable layer not measured yet")

// firstMeasureWait is how long the first ask for a container's usage waits
// for its walk: long enough for any layer a container normally writes, so
// that its first stats are complete; short enough that a layer built to be
// slow to walk does not hold the call.
const firstMeasureWait = time.Second

// rootfsMeasure is the last measure of one container's upper dir.
type rootfsMeasure struct {
	at       time.Time // of the last walk's end; zero before the first
	usage    FsUsage
	err      error         // of the first walk, when it failed
	measured chan struct{} // closed when the first walk ends
	queued   bool          // waiting for, or in, the walker
}

// rootfsUsages keeps the containers' measures and the one walker that
// takes them, one upper dir at a time.
type rootfsUsages struct {
	mu      sync.Mutex
	byID    map[string]*rootfsMeasure
	pending []string
	walking bool
}

// RootfsUsage reports what a container has written: the bytes and inodes of
// its rootfs's upper dir (the kubelet's "writable layer"). Unknown →
// ErrNotFound.
//
// The figures come from a walk of the upper dir, which costs what the
// container wrote, so no call makes it: a measure older than usageTTL is
// answered as it is while the walker takes a new one, as containerd answers
// from its periodic snapshot sync. Only a container's first ask waits, and
// at most firstMeasureWait; past that it is ErrNotMeasured.
func (s *Store) RootfsUsage(id string) (FsUsage, error) {
	if err := validRootfsID(id); err != nil {
		return FsUsage{}, err
	}
	upper := s.upperDir(id)
	if _, err := os.Stat(upper); err != nil {
		s.forgetRootfsUsage(id)
		return FsUsage{}, fmt.Errorf("rootfs %s: %w", id, ErrNotFound)
	}
	m := s.askRootfsUsage(id)
	if !m.waitMeasured() {
		return FsUsage{}, fmt.Errorf("rootfs %s: %w", id, ErrNotMeasured)
	}
	u := &s.rootfsUsage
	u.mu.Lock()
	defer u.mu.Unlock()
	if m.err != nil {
		return FsUsage{}, fmt.Errorf("usage of rootfs %s: %w", id, m.err)
	}
	return m.usage, nil
}

// waitMeasured waits up to firstMeasureWait for m's first walk to end.
func (m *rootfsMeasure) waitMeasured() bool {
	select {
	case <-m.measured:
		return true
	default:
	}
	timer := time.NewTimer(firstMeasureWait)
	defer timer.Stop()
	select {
	case <-m.measured:
		return true
	case <-timer.C:
		return false
	}
}

func (s *Store) upperDir(id string) string {
	return filepath.Join(s.rootfsDir(id), "upper")
}

// askRootfsUsage returns id's measure, queueing a walk when there is none
// yet or it is older than usageTTL.
func (s *Store) askRootfsUsage(id string) *rootfsMeasure {
	u := &s.rootfsUsage
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.byID == nil {
		u.byID = map[string]*rootfsMeasure{}
	}
	m := u.byID[id]
	if m == nil {
		m = &rootfsMeasure{measured: make(chan struct{})}
		u.byID[id] = m
	}
	if m.queued || (!m.at.IsZero() && s.opts.Hooks.now().Sub(m.at) < usageTTL) {
		return m
	}
	m.queued = true
	u.pending = append(u.pending, id)
	if !u.walking {
		u.walking = true
		go s.walkRootfsUsages()
	}
	return m
}

// walkRootfsUsages measures the queued upper dirs one at a time, and ends
// when none is left.
func (s *Store) walkRootfsUsages() {
	u := &s.rootfsUsage
	for {
		u.mu.Lock()
		if len(u.pending) == 0 {
			u.walking = false
			u.pending = nil
			u.mu.Unlock()
			return
		}
		id := u.pending[0]
		u.pending = u.pending[1:]
		u.mu.Unlock()
		s.measureRootfs(id)
	}
}

func (s *Store) measureRootfs(id string) {
	upper := s.upperDir(id)
	bytes, inodes, err := s.opts.Hooks.walkUpper(upper)
	if _, statErr := os.Stat(upper); statErr != nil {
		s.forgetRootfsUsage(id) // removed meanwhile
		return
	}
	u := &s.rootfsUsage
	u.mu.Lock()
	defer u.mu.Unlock()
	m := u.byID[id]
	if m == nil {
		return // forgotten meanwhile
	}
	m.queued = false
	m.at = s.opts.Hooks.now()
	switch {
	case err == nil:
		m.usage, m.err = FsUsage{Mountpoint: upper, UsedBytes: bytes, InodesUsed: inodes}, nil
	case m.usage.Mountpoint == "":
		m.err = err // nothing measured yet: the stats leave the layer out
	default:
		s.log.WithError(err).WithField("id", id).Warn("image store: measure of a writable layer failed; its stats answer the last one")
	}
	select {
	case <-m.measured:
	default:
		close(m.measured)
	}
}

// forgetRootfsUsage drops id's measure: its rootfs is gone.
func (s *Store) forgetRootfsUsage(id string) {
	u := &s.rootfsUsage
	u.mu.Lock()
	delete(u.byID, id)
	u.mu.Unlock()
}
