// Package fake has in-memory stand-ins for what server/ needs of the
// packages below it (image, network, oci, conmon): each keeps what it was
// asked to make, so that a test can check that a failed call left nothing
// behind, and each takes an error to inject per call. They need no root,
// runc or CNI. Only server's tests import this package.
package fake

import (
	"errors"
	"sync"
)

// ErrInjected is an error for a test to inject, one that no real package returns.
var ErrInjected = errors.New("injected failure")

// Failures holds the errors to inject, by the name of the method that
// returns them; the zero value injects none. It is embedded in every fake.
type Failures struct {
	errs sync.Map // method name → error
}

// Fail makes every later call of method return err (nil: succeed again).
func (f *Failures) Fail(method string, err error) { f.errs.Store(method, err) }

func (f *Failures) err(method string) error {
	v, _ := f.errs.Load(method)
	err, _ := v.(error) // Fail(method, nil) stores a nil interface
	return err
}

// locked is the whole of a fake method that only records what it was
// asked: the injected error of method, if any, else fn under mu.
func (f *Failures) locked(method string, mu *sync.Mutex, fn func()) error {
	if err := f.err(method); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	fn()
	return nil
}
