package oci

import (
	"fmt"
	"sort"
)

// DefaultHandler is the runtime handler used when a pod names none.
const DefaultHandler = "runc"

// Handlers maps RuntimeClass handler names to runtimes, e.g. "runc" to
// /usr/sbin/runc and "crun" to Debian's crun.
type Handlers struct {
	// Default is the handler for a pod with no RuntimeClass; "" means
	// DefaultHandler.
	Default  string
	Runtimes map[string]*Runtime
}

// Get returns the runtime of handler ("" selects the default);
// ErrUnknownHandler names a handler with no configured runtime.
func (h *Handlers) Get(handler string) (*Runtime, error) {
	if handler == "" {
		handler = h.Default
		if handler == "" {
			handler = DefaultHandler
		}
	}
	r, ok := h.Runtimes[handler]
	if !ok {
		return nil, fmt.Errorf("%w %q (configured: %v)", ErrUnknownHandler, handler, h.Names())
	}
	return r, nil
}

// Names lists the configured handlers, sorted.
func (h *Handlers) Names() []string {
	names := make([]string, 0, len(h.Runtimes))
	for n := range h.Runtimes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
