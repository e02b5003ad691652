package image

import (
	"context"
	"slices"
	"sync"
)

// unpackSlots bounds the layers decoded and written at once (CPU work),
// across all pulls. A layer gives its slot back once its files are
// written, before it waits for the disk to sync them, so that another
// layer's unpack keeps the CPU busy meanwhile; a release gives a slot back
// once, however often it is called. A freed slot goes to the waiting pulls
// in turn: the kubelet
// pulls several images at once (serializeImagePulls: false), and a small
// image must not wait behind every layer of a large one pulled just
// before it, nor an image of many layers hold the slots for itself. A
// pull is the key its layers wait under; the waiters of one pull are
// served in the order they came.
type unpackSlots struct {
	mu    sync.Mutex
	free  int
	turns []*slotQueue // the pulls that wait, the next to serve first
}

// slotQueue is one pull's waiting layers.
type slotQueue struct {
	pull    any
	waiters []chan struct{}
}

func newUnpackSlots(n int) *unpackSlots { return &unpackSlots{free: max(1, n)} }

// try takes a slot if one is free and no pull waits for one.
func (u *unpackSlots) try() (release func(), ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.free == 0 {
		return nil, false
	}
	u.free--
	return sync.OnceFunc(u.release), true
}

// wait takes a slot for pull, waiting for its turn.
func (u *unpackSlots) wait(ctx context.Context, pull any) (release func(), _ error) {
	granted := u.enqueue(pull)
	select {
	case <-granted:
		return sync.OnceFunc(u.release), nil
	case <-ctx.Done():
		if !u.dequeue(pull, granted) {
			u.release() // granted meanwhile: hand it on
		}
		return nil, ctx.Err()
	}
}

// enqueue puts a waiter in pull's queue, or grants it a free slot at once
// (there is one only while nobody waits).
func (u *unpackSlots) enqueue(pull any) chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	ch := make(chan struct{})
	if u.free > 0 {
		u.free--
		close(ch)
		return ch
	}
	i := slices.IndexFunc(u.turns, func(q *slotQueue) bool { return q.pull == pull })
	if i < 0 {
		u.turns = append(u.turns, &slotQueue{pull: pull})
		i = len(u.turns) - 1
	}
	u.turns[i].waiters = append(u.turns[i].waiters, ch)
	return ch
}

// dequeue takes a waiter that gave up out of its queue; false when it is
// not there, having been granted a slot.
func (u *unpackSlots) dequeue(pull any, ch chan struct{}) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	i := slices.IndexFunc(u.turns, func(q *slotQueue) bool { return q.pull == pull })
	if i < 0 {
		return false
	}
	q := u.turns[i]
	j := slices.Index(q.waiters, ch)
	if j < 0 {
		return false
	}
	q.waiters = slices.Delete(q.waiters, j, j+1)
	if len(q.waiters) == 0 {
		u.turns = slices.Delete(u.turns, i, i+1)
	}
	return true
}

// release gives a slot to the first waiter of the pull whose turn it is,
// and puts that pull last, or frees it when nobody waits.
func (u *unpackSlots) release() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.turns) == 0 {
		u.free++
		return
	}
	q := u.turns[0]
	u.turns = u.turns[1:]
	ch := q.waiters[0]
	q.waiters = q.waiters[1:]
	if len(q.waiters) > 0 {
		u.turns = append(u.turns, q)
	}
	close(ch)
}
