// Package chans holds the one loop that serves a channel until either side
// ends: a terminal-size stream is read this way in the daemon (from the
// client) and in the monitor's client (to the monitor).
package chans

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
