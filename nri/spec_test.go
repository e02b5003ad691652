package nri

import (
	"slices"
	"testing"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func baseSpec() *specs.Spec {
	return &specs.Spec{
		Process: &specs.Process{Args: []string{"sh"}, Env: []string{"PATH=/bin", "A=old"}},
		Mounts:  []specs.Mount{{Destination: "/proc", Type: "proc"}, {Destination: "/data", Type: "bind", Source: "/x"}},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace, Path: "/run/ns/net"}},
		},
	}
}

// Each kind of adjustment a plugin makes ends up in the spec minicri writes.
func TestAdjustSpec(t *testing.T) {
	for _, c := range []struct {
		name   string
		adjust func(a *api.ContainerAdjustment)
		check  func(s *specs.Spec) bool
	}{
		{"env added and replaced", func(a *api.ContainerAdjustment) { a.AddEnv("A", "new"); a.AddEnv("B", "b") },
			func(s *specs.Spec) bool { return slices.Equal(s.Process.Env, []string{"PATH=/bin", "A=new", "B=b"}) }},
		{"env removed", func(a *api.ContainerAdjustment) { a.RemoveEnv("A") },
			func(s *specs.Spec) bool { return slices.Equal(s.Process.Env, []string{"PATH=/bin"}) }},
		{"args", func(a *api.ContainerAdjustment) { a.SetArgs([]string{"sleep", "1"}) },
			func(s *specs.Spec) bool { return slices.Equal(s.Process.Args, []string{"sleep", "1"}) }},
		{"rlimit", func(a *api.ContainerAdjustment) { a.AddRlimit("RLIMIT_NOFILE", 20, 10) },
			func(s *specs.Spec) bool {
				return slices.Equal(s.Process.Rlimits, []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 20, Soft: 10}})
			}},
		{"annotation", func(a *api.ContainerAdjustment) { a.AddAnnotation("k", "v") },
			func(s *specs.Spec) bool { return s.Annotations["k"] == "v" }},
		{"mount replaced", func(a *api.ContainerAdjustment) {
			a.AddMount(&api.Mount{Destination: "/data", Type: "bind", Source: "/y", Options: []string{"rbind"}})
		}, func(s *specs.Spec) bool {
			i := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == "/data" })
			return len(s.Mounts) == 2 && i >= 0 && s.Mounts[i].Source == "/y"
		}},
		{"mount removed", func(a *api.ContainerAdjustment) { a.RemoveMount("/data") },
			func(s *specs.Spec) bool { return len(s.Mounts) == 1 && s.Mounts[0].Destination == "/proc" }},
		{"device", func(a *api.ContainerAdjustment) {
			a.AddDevice(&api.LinuxDevice{Path: "/dev/xnull", Type: "c", Major: 1, Minor: 3})
		}, func(s *specs.Spec) bool {
			return len(s.Linux.Devices) == 1 && s.Linux.Devices[0].Path == "/dev/xnull" && s.Linux.Devices[0].Major == 1
		}},
		{"memory limit", func(a *api.ContainerAdjustment) { a.SetLinuxMemoryLimit(64 << 20) },
			func(s *specs.Spec) bool {
				r := s.Linux.Resources
				return r != nil && r.Memory != nil && r.Memory.Limit != nil && *r.Memory.Limit == 64<<20
			}},
		{"cpuset", func(a *api.ContainerAdjustment) { a.SetLinuxCPUSetCPUs("0") },
			func(s *specs.Spec) bool { r := s.Linux.Resources; return r != nil && r.CPU != nil && r.CPU.Cpus == "0" }},
		{"namespace removed", func(a *api.ContainerAdjustment) { a.RemoveNamespace(&api.LinuxNamespace{Type: "network"}) },
			func(s *specs.Spec) bool {
				return len(s.Linux.Namespaces) == 1 && s.Linux.Namespaces[0].Type == specs.PIDNamespace
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := &api.ContainerAdjustment{}
			c.adjust(a)
			s := baseSpec()
			if err := AdjustSpec(s, a, nil); err != nil {
				t.Fatalf("AdjustSpec: %v", err)
			}
			if !c.check(s) {
				t.Errorf("spec not adjusted: process %+v, mounts %+v, linux %+v, annotations %v", s.Process, s.Mounts, s.Linux, s.Annotations)
			}
		})
	}
	if err := AdjustSpec(baseSpec(), nil, nil); err != nil {
		t.Errorf("no adjustment: %v", err)
	}
}

// The CDI devices a plugin asks for go to the runtime's injector.
func TestAdjustSpecInjectsCDIDevices(t *testing.T) {
	a := &api.ContainerAdjustment{}
	a.AddCDIDevice(&api.CDIDevice{Name: "vendor.com/gpu=0"})
	var got []string
	inject := func(s *specs.Spec, names []string) error { got = names; return nil }
	if err := AdjustSpec(baseSpec(), a, inject); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"vendor.com/gpu=0"}) {
		t.Errorf("injected %v, want the plugin's device", got)
	}
}
