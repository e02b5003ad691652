package oci

import (
	"fmt"
	"maps"
	"slices"
)

// DefaultHandler is the runtime handler used when a pod names none.
const DefaultHandler = "runc"

// Handlers maps RuntimeClass handler names to runtimes, e.g. "runc" to
// /usr/sbin/runc and "crun" to Debian's crun.
type Handlers = HandlerSet[*Runtime]

// HandlerSet maps handler names to runtimes of any kind: the daemon's are
// *Runtime, the handler tests' are fakes that must pick a handler the same
// way.
type HandlerSet[R any] struct {
	// Default is the handler for a pod with no RuntimeClass; "" means
	// DefaultHandler.
	Default  string
	Runtimes map[string]R
}

// Get returns the runtime of handler ("" selects the default);
// ErrUnknownHandler names a handler with no configured runtime.
func (h *HandlerSet[R]) Get(handler string) (R, error) {
	if handler == "" {
		handler = h.Default
		if handler == "" {
			handler = DefaultHandler
		}
	}
	r, ok := h.Runtimes[handler]
	if !ok {
		return r, fmt.Errorf("%w %q (configured: %v)", ErrUnknownHandler, handler, h.Names())
	}
	return r, nil
}

// Names lists the configured handlers, sorted.
func (h *HandlerSet[R]) Names() []string {
	return slices.Sorted(maps.Keys(h.Runtimes))
}
