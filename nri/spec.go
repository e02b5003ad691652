package nri

import (
	"fmt"
	"slices"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/runtime-tools/generate"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// AdjustSpec applies the plugins' adjustment of a container to its OCI spec,
// before the spec is written; injectCDI adds the CDI devices plugins ask
// for (nil: none are added). The library's generator does the NRI side;
// specEditor below is the plain editing of a spec it stands on.
func AdjustSpec(spec *specs.Spec, adj *api.ContainerAdjustment, injectCDI func(*specs.Spec, []string) error) error {
	if adj == nil {
		return nil
	}
	var opts []generate.GeneratorOption
	if injectCDI != nil {
		opts = append(opts, generate.WithCDIDeviceInjector(injectCDI))
	}
	g := generate.SpecGenerator(&specEditor{spec}, opts...)
	if err := g.Adjust(adj); err != nil {
		return fmt.Errorf("%w: adjust the OCI spec: %w", ErrPlugin, err)
	}
	return nil
}

// specEditor edits a spec in place: generate.UnderlyingGenerator, which the
// library otherwise expects from opencontainers/runtime-tools (a large
// dependency for these few edits).
type specEditor struct{ s *specs.Spec }

func (e *specEditor) Spec() *specs.Spec { return e.s }

func (e *specEditor) process() *specs.Process {
	if e.s.Process == nil {
		e.s.Process = &specs.Process{}
	}
	return e.s.Process
}

func (e *specEditor) linux() *specs.Linux {
	if e.s.Linux == nil {
		e.s.Linux = &specs.Linux{}
	}
	return e.s.Linux
}

func (e *specEditor) resources() *specs.LinuxResources {
	l := e.linux()
	if l.Resources == nil {
		l.Resources = &specs.LinuxResources{}
	}
	return l.Resources
}

func (e *specEditor) cpu() *specs.LinuxCPU {
	r := e.resources()
	if r.CPU == nil {
		r.CPU = &specs.LinuxCPU{}
	}
	return r.CPU
}

func (e *specEditor) memory() *specs.LinuxMemory {
	r := e.resources()
	if r.Memory == nil {
		r.Memory = &specs.LinuxMemory{}
	}
	return r.Memory
}

func (e *specEditor) hooks() *specs.Hooks {
	if e.s.Hooks == nil {
		e.s.Hooks = &specs.Hooks{}
	}
	return e.s.Hooks
}

func (e *specEditor) AddAnnotation(key, value string) {
	if e.s.Annotations == nil {
		e.s.Annotations = map[string]string{}
	}
	e.s.Annotations[key] = value
}

func (e *specEditor) RemoveAnnotation(key string) { delete(e.s.Annotations, key) }

func (e *specEditor) AddDevice(d specs.LinuxDevice) {
	l := e.linux()
	for i := range l.Devices {
		if l.Devices[i].Path == d.Path {
			l.Devices[i] = d
			return
		}
	}
	l.Devices = append(l.Devices, d)
}

func (e *specEditor) RemoveDevice(path string) {
	l := e.linux()
	l.Devices = slices.DeleteFunc(l.Devices, func(d specs.LinuxDevice) bool { return d.Path == path })
}

func (e *specEditor) AddOrReplaceLinuxNamespace(ns, path string) error {
	l := e.linux()
	n := specs.LinuxNamespace{Type: specs.LinuxNamespaceType(ns), Path: path}
	for i := range l.Namespaces {
		if l.Namespaces[i].Type == n.Type {
			l.Namespaces[i] = n
			return nil
		}
	}
	l.Namespaces = append(l.Namespaces, n)
	return nil
}

func (e *specEditor) RemoveLinuxNamespace(ns string) error {
	l := e.linux()
	l.Namespaces = slices.DeleteFunc(l.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.LinuxNamespaceType(ns) })
	return nil
}

func (e *specEditor) AddPreStartHook(h specs.Hook) {
	e.hooks().Prestart = append(e.hooks().Prestart, h) //nolint:staticcheck // the library still sets it
}
func (e *specEditor) AddPostStartHook(h specs.Hook) {
	e.hooks().Poststart = append(e.hooks().Poststart, h)
}
func (e *specEditor) AddPostStopHook(h specs.Hook) {
	e.hooks().Poststop = append(e.hooks().Poststop, h)
}

func (e *specEditor) AddProcessEnv(name, value string) {
	p := e.process()
	kv := name + "=" + value
	for i, v := range p.Env {
		if strings.HasPrefix(v, name+"=") {
			p.Env[i] = kv
			return
		}
	}
	p.Env = append(p.Env, kv)
}

func (e *specEditor) ClearProcessEnv()               { e.process().Env = nil }
func (e *specEditor) SetProcessArgs(args []string)   { e.process().Args = args }
func (e *specEditor) SetProcessOOMScoreAdj(adj int)  { e.process().OOMScoreAdj = &adj }
func (e *specEditor) SetLinuxCgroupsPath(p string)   { e.linux().CgroupsPath = p }
func (e *specEditor) AddLinuxSysctl(key, val string) { e.sysctl()[key] = val }
func (e *specEditor) RemoveLinuxSysctl(key string)   { delete(e.linux().Sysctl, key) }

func (e *specEditor) sysctl() map[string]string {
	l := e.linux()
	if l.Sysctl == nil {
		l.Sysctl = map[string]string{}
	}
	return l.Sysctl
}

func (e *specEditor) SetLinuxRootPropagation(rp string) error {
	e.linux().RootfsPropagation = rp
	return nil
}

func (e *specEditor) AddMount(m specs.Mount) { e.s.Mounts = append(e.s.Mounts, m) }
func (e *specEditor) ClearMounts()           { e.s.Mounts = nil }
func (e *specEditor) Mounts() []specs.Mount  { return e.s.Mounts }
func (e *specEditor) RemoveMount(dest string) {
	e.s.Mounts = slices.DeleteFunc(e.s.Mounts, func(m specs.Mount) bool { return m.Destination == dest })
}

func (e *specEditor) AddLinuxResourcesDevice(allow bool, devType string, major, minor *int64, access string) {
	r := e.resources()
	r.Devices = append(r.Devices, specs.LinuxDeviceCgroup{Allow: allow, Type: devType, Major: major, Minor: minor, Access: access})
}

func (e *specEditor) AddLinuxResourcesHugepageLimit(pageSize string, limit uint64) {
	r := e.resources()
	for i := range r.HugepageLimits {
		if r.HugepageLimits[i].Pagesize == pageSize {
			r.HugepageLimits[i].Limit = limit
			return
		}
	}
	r.HugepageLimits = append(r.HugepageLimits, specs.LinuxHugepageLimit{Pagesize: pageSize, Limit: limit})
}

func (e *specEditor) AddLinuxResourcesUnified(key, val string) {
	r := e.resources()
	if r.Unified == nil {
		r.Unified = map[string]string{}
	}
	r.Unified[key] = val
}

func (e *specEditor) SetLinuxResourcesCPUCpus(cpus string)        { e.cpu().Cpus = cpus }
func (e *specEditor) SetLinuxResourcesCPUMems(mems string)        { e.cpu().Mems = mems }
func (e *specEditor) SetLinuxResourcesCPUPeriod(p uint64)         { e.cpu().Period = &p }
func (e *specEditor) SetLinuxResourcesCPUQuota(q int64)           { e.cpu().Quota = &q }
func (e *specEditor) SetLinuxResourcesCPUShares(s uint64)         { e.cpu().Shares = &s }
func (e *specEditor) SetLinuxResourcesCPURealtimePeriod(p uint64) { e.cpu().RealtimePeriod = &p }
func (e *specEditor) SetLinuxResourcesCPURealtimeRuntime(t int64) { e.cpu().RealtimeRuntime = &t }
func (e *specEditor) SetLinuxResourcesMemoryLimit(l int64)        { e.memory().Limit = &l }
func (e *specEditor) SetLinuxResourcesMemorySwap(s int64)         { e.memory().Swap = &s }

var _ generate.UnderlyingGenerator = (*specEditor)(nil)
