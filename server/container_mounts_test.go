package server

import (
	"errors"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/internal/kernelfeat"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/testreq"
)

// probeWith is a handler's runtime that reports features f, or err.
type probeWith struct {
	f   oci.Features
	err error
}

func (p probeWith) Available() error                { return nil }
func (p probeWith) Features() (oci.Features, error) { return p.f, p.err }

// A mount with bind options (KEP-5855) or rro is refused on a handler whose
// runtime does not list them, naming the handler and the field: never a
// mount made without the protection the pod asked for.
func TestCheckHandlerMounts(t *testing.T) {
	all := oci.Features{RecursiveReadOnly: true, BindOptions: true}
	cases := []struct {
		name      string
		probe     probeWith
		m         *runtime.Mount
		field     string
		oldKernel bool // before 5.12: no recursive read-only mounts (kernelfeat.RecursiveReadOnly)
	}{
		{"plain mount, no features", probeWith{}, &runtime.Mount{}, "", false},
		{"bind options, listed", probeWith{f: all}, &runtime.Mount{MountOptions: []string{"noexec"}}, "", false},
		{"bind options, not listed", probeWith{f: oci.Features{RecursiveReadOnly: true}}, &runtime.Mount{MountOptions: []string{"noexec"}}, "config.mounts.mount_options", false},
		{"bind options, no features", probeWith{err: errors.New("unknown command features")}, &runtime.Mount{MountOptions: []string{"nosuid"}}, "config.mounts.mount_options", false},
		{"rro, not listed", probeWith{f: oci.Features{BindOptions: true}}, &runtime.Mount{Readonly: true, RecursiveReadOnly: true}, "config.mounts.recursive_read_only", false},
		{"rro and bind options, listed", probeWith{f: all}, &runtime.Mount{Readonly: true, RecursiveReadOnly: true, MountOptions: []string{"nodev"}}, "", false},
		// runc lists rro whatever the kernel (Debian 11's 5.10 has no mount_setattr).
		{"rro listed, the kernel cannot", probeWith{f: all}, &runtime.Mount{Readonly: true, RecursiveReadOnly: true}, "config.mounts.recursive_read_only", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer kernelfeat.RecursiveReadOnly.Force(!c.oldKernel, "mount_setattr: function not implemented")()
			c.m.ContainerPath, c.m.HostPath = "/data", "/srv"
			cfg := &runtime.ContainerConfig{Mounts: []*runtime.Mount{c.m}}
			testreq.CheckValidation(t, checkHandlerMounts(c.probe, "h", cfg), c.field)
		})
	}
}

// Status claims recursive read-only mounts for a handler only where the
// kernel can make them too: runc lists rro on Debian 11's 5.10, which has
// no mount_setattr, and the kubelet would send such mounts to fail at
// create.
func TestRecursiveReadOnlyNeedsTheKernel(t *testing.T) {
	f := oci.Features{RecursiveReadOnly: true}
	for _, kernel := range []bool{true, false} {
		restore := kernelfeat.RecursiveReadOnly.Force(kernel, "mount_setattr: function not implemented")
		if got := recursiveReadOnly(f); got != kernel {
			t.Errorf("runtime lists rro, kernel can = %v: recursiveReadOnly = %v", kernel, got)
		}
		restore()
	}
	if recursiveReadOnly(oci.Features{}) {
		t.Errorf("a runtime that lists no rro: recursiveReadOnly = true")
	}
}
