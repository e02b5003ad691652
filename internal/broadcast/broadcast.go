// Package broadcast fans values out to subscribers without ever blocking the
// sender: each subscriber has a bounded buffer, and one that lets it fill is
// dropped (its channel closed, its Err set) instead of slowing the sender down.
package broadcast

import (
	"context"
	"errors"
	"sync"
)

// The errors that end a subscription, as its Err says.
var (
	// ErrSlow: the subscriber's buffer was full when a value was sent; it
	// did not keep up.
	ErrSlow = errors.New("subscriber too slow: its buffer of events is full")
	// ErrClosed: the hub was closed, which ends every subscription.
	ErrClosed = errors.New("event hub closed")
)

// Hub sends values of type T to its subscribers, in the order Send is
// called, the same order for every subscriber. The zero Hub is ready to use;
// use it by pointer.
type Hub[T any] struct {
	mu     sync.Mutex
	subs   map[*Subscription[T]]struct{}
	closed bool
}

// Subscription is one subscriber's view of a Hub.
type Subscription[T any] struct {
	hub  *Hub[T]
	ch   chan T
	stop func() bool // stops the context's AfterFunc
	err  error       // why ch was closed; guarded by hub.mu
}

// C delivers the values sent after Subscribe. It is closed when the
// subscription ends; Err then says why.
func (s *Subscription[T]) C() <-chan T { return s.ch }

// Err is why the subscription ended: ErrSlow, ErrClosed, the context's
// error, or nil while it runs (or after Close).
func (s *Subscription[T]) Err() error {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.err
}

// Close ends the subscription; calling it again, or after the subscription
// ended otherwise, does nothing.
func (s *Subscription[T]) Close() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	s.hub.endLocked(s, nil)
}

// Subscribe starts a subscription with room for buffer values not yet
// received. It ends, with ctx's error, when ctx ends; no goroutine waits for
// that (context.AfterFunc).
func (h *Hub[T]) Subscribe(ctx context.Context, buffer int) *Subscription[T] {
	s := &Subscription[T]{hub: h, ch: make(chan T, max(buffer, 1))}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		s.err = ErrClosed
		close(s.ch)
		return s
	}
	if h.subs == nil {
		h.subs = map[*Subscription[T]]struct{}{}
	}
	h.subs[s] = struct{}{}
	s.stop = context.AfterFunc(ctx, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.endLocked(s, context.Cause(ctx))
	})
	return s
}

// Active says whether anyone listens: a sender can skip building a value
// nobody would receive.
func (h *Hub[T]) Active() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs) > 0
}

// Send gives v to every subscriber without blocking. A subscriber whose
// buffer is full is dropped with ErrSlow.
func (h *Hub[T]) Send(v T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.ch <- v:
		default:
			h.endLocked(s, ErrSlow)
		}
	}
}

// Close ends every subscription with ErrClosed; later subscriptions end at once.
func (h *Hub[T]) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		h.endLocked(s, ErrClosed)
	}
}

// endLocked ends s once; the caller holds h.mu.
func (h *Hub[T]) endLocked(s *Subscription[T], err error) {
	if _, ok := h.subs[s]; !ok {
		return
	}
	delete(h.subs, s)
	if s.stop != nil {
		s.stop()
	}
	s.err = err
	close(s.ch)
}
