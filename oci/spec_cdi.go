package oci

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// CDI resolves Container Device Interface devices ("vendor.com/class=name")
// against the spec files that device plugins and DRA drivers write, and adds
// them to a generated spec, with the library containerd and cri-o use.
//
// Nothing is read until a container asks for a device: the spec files are
// read then, and again at each later ask, so that a spec written after the
// daemon started is seen. No watch runs in the background; a node whose
// containers ask for no device pays nothing.
type CDI struct {
	dirs []string

	mu    sync.Mutex
	cache *cdi.Cache // made at the first Resolve
}

// NewCDI reads specs from dirs, in rising priority. With no dirs, no device
// resolves.
func NewCDI(dirs []string) *CDI {
	return &CDI{dirs: append([]string(nil), dirs...)}
}

// Dirs are the spec directories.
func (r *CDI) Dirs() []string { return r.dirs }

// Resolve reads the spec files again and returns the devices that none
// defines. specErrs reports spec files that could not be read or conflict;
// their devices do not resolve, the others still do.
func (r *CDI) Resolve(devices []string) (unresolved []string, specErrs error) {
	if len(r.dirs) == 0 {
		return append([]string(nil), devices...), nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cache == nil {
		// Manual refresh: a new cache reads the dirs once, Refresh again.
		r.cache, _ = cdi.NewCache(cdi.WithAutoRefresh(false), cdi.WithSpecDirs(r.dirs...))
	} else {
		_ = r.cache.Refresh() // its errors are the ones GetErrors lists
	}
	specErrs = joinSpecErrors(r.cache.GetErrors())
	for _, d := range devices {
		if r.cache.GetDevice(d) == nil {
			unresolved = append(unresolved, d)
		}
	}
	return unresolved, specErrs
}

// joinSpecErrors orders the errors by spec file, for a stable message.
func joinSpecErrors(byPath map[string][]error) error {
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var errs []error
	for _, p := range paths {
		errs = append(errs, fmt.Errorf("%s: %w", p, errors.Join(byPath[p]...)))
	}
	return errors.Join(errs...)
}

// Inject adds the devices, as the last Resolve found them, to s: device
// nodes and their cgroup rules, environment, mounts, hooks, as the specs
// say. A device that no longer resolves is ErrInvalid.
func (r *CDI) Inject(s *specs.Spec, devices []string) error {
	if len(devices) == 0 {
		return nil
	}
	r.mu.Lock()
	cache := r.cache
	r.mu.Unlock()
	if cache == nil {
		return fmt.Errorf("%w: CDI devices %s: no spec read", ErrInvalid, strings.Join(devices, ", "))
	}
	unresolved, err := cache.InjectDevices(s, devices...)
	if len(unresolved) > 0 {
		return fmt.Errorf("%w: unknown CDI devices %s", ErrInvalid, strings.Join(unresolved, ", "))
	}
	if err != nil {
		return fmt.Errorf("inject CDI devices: %w", err)
	}
	return nil
}
