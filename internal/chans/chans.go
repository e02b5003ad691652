// Package chans holds the one loop that serves a channel until either side
// ends: a terminal-size stream is read this way in the daemon (from the
// client) and in the monitor's client (to the monitor); and the one bounded
// wait for a channel to close (an exit recorded, a monitor gone).
package chans

import (
	"context"
	"time"
)

// Each calls fn with every value received from in until in is closed, done
// is closed, or fn returns false.
func Each[T any](in <-chan T, done <-chan struct{}, fn func(T) bool) {
	for {
		select {
		case <-done:
			return
		case v, ok := <-in:
			if !ok || !fn(v) {
				return
			}
		}
	}
}

// WaitClosed waits for ch to close; false when the timeout or ctx ended
// first.
func WaitClosed(ctx context.Context, ch <-chan struct{}, timeout time.Duration) bool {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-ch:
		return true
	case <-timer.C:
		return false
	case <-ctx.Done():
		return false
	}
}
