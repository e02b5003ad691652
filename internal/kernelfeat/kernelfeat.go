// Package kernelfeat answers every "can this kernel do X" question of
// minicri, and answers each the same way: by doing X once, on scratch
// directories in a private mount namespace, the first time it is asked.
// Whether an API accepts a request tells nothing: before 6.5 overlayfs takes
// any fsconfig key and fails only at create, and mount_setattr takes
// MOUNT_ATTR_IDMAP for a tmpfs and fails with EINVAL before 6.3. Status
// reports the answers (Report), so the kubelet and an operator see what the
// daemon decided.
//
// A probe that cannot run at all (no privilege, no scratch directory) says
// so in the log and answers "no": every caller's "no" is the way that works
// on the oldest kernel minicri supports (5.15).
package kernelfeat

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/sirupsen/logrus"
)

// Answer is what a probe found.
type Answer struct {
	// Supported: the operation worked.
	Supported bool
	// Reason says why not (the kernel's error, or why the probe could not
	// run); empty when Supported.
	Reason string
}

func (a Answer) String() string {
	if a.Supported {
		return "yes"
	}
	return "no: " + a.Reason
}

// Feature is one probed kernel capability.
type Feature struct {
	// Name is the key Status reports it under.
	Name   string
	answer func() Answer
	forced atomic.Pointer[Answer]
}

// errCannotProbe marks a probe that could not do the operation at all, as
// against the kernel refusing it.
var errCannotProbe = errors.New("cannot probe")

// newFeature makes a feature whose answer is probe's, computed once. probe
// returns nil when the kernel did the operation, an error wrapping
// errCannotProbe when it could not try, and any other error when the
// kernel refused.
func newFeature(name string, probe func() error) *Feature {
	f := &Feature{Name: name}
	f.answer = sync.OnceValue(func() Answer {
		err := probe()
		if err == nil {
			return Answer{Supported: true}
		}
		if errors.Is(err, errCannotProbe) {
			logger().WithError(err).Warnf("kernel feature %s: the probe could not run; assuming the oldest supported kernel (5.15) and not using it", name)
		} else {
			logger().Infof("kernel feature %s: not available: %v", name, err)
		}
		return Answer{Reason: err.Error()}
	})
	register(f)
	return f
}

// Get returns the answer, probing on the first call.
func (f *Feature) Get() Answer {
	if a := f.forced.Load(); a != nil {
		return *a
	}
	return f.answer()
}

// Supported is Get().Supported.
func (f *Feature) Supported() bool { return f.Get().Supported }

// Force makes Get return a instead of the probe's answer until the returned
// restore runs: tests use it to take a kernel's other side ("before 6.5")
// on this host. Not for production code.
func (f *Feature) Force(supported bool, reason string) (restore func()) {
	a := &Answer{Supported: supported, Reason: reason}
	if supported {
		a.Reason = ""
	}
	prev := f.forced.Swap(a)
	return func() { f.forced.Store(prev) }
}

var (
	registryMu sync.Mutex
	registry   []*Feature
	logMu      sync.Mutex
	log        = logrus.NewEntry(logrus.StandardLogger())
)

func register(f *Feature) {
	registryMu.Lock()
	defer registryMu.Unlock()
	registry = append(registry, f)
}

// SetLogger sends the probes' notes to the daemon's log.
func SetLogger(l *logrus.Entry) {
	logMu.Lock()
	defer logMu.Unlock()
	log = l
}

func logger() *logrus.Entry {
	logMu.Lock()
	defer logMu.Unlock()
	return log
}

// Report runs every probe not run yet and returns each answer by name, as
// Status shows them ("yes", or "no: why").
func Report() map[string]string {
	registryMu.Lock()
	fs := append([]*Feature(nil), registry...)
	registryMu.Unlock()
	sort.Slice(fs, func(i, j int) bool { return fs[i].Name < fs[j].Name })
	out := make(map[string]string, len(fs))
	for _, f := range fs {
		out[f.Name] = f.Get().String()
	}
	return out
}

func cannotProbe(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errCannotProbe, fmt.Sprintf(format, args...))
}
