package server

import (
	"errors"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/oci"
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
		name  string
		probe probeWith
		m     *runtime.Mount
		field string
	}{
		{"plain mount, no features", probeWith{}, &runtime.Mount{}, ""},
		{"bind options, listed", probeWith{f: all}, &runtime.Mount{MountOptions: []string{"noexec"}}, ""},
		{"bind options, not listed", probeWith{f: oci.Features{RecursiveReadOnly: true}}, &runtime.Mount{MountOptions: []string{"noexec"}}, "config.mounts.mount_options"},
		{"bind options, no features", probeWith{err: errors.New("unknown command features")}, &runtime.Mount{MountOptions: []string{"nosuid"}}, "config.mounts.mount_options"},
		{"rro, not listed", probeWith{f: oci.Features{BindOptions: true}}, &runtime.Mount{Readonly: true, RecursiveReadOnly: true}, "config.mounts.recursive_read_only"},
		{"rro and bind options, listed", probeWith{f: all}, &runtime.Mount{Readonly: true, RecursiveReadOnly: true, MountOptions: []string{"nodev"}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.m.ContainerPath, c.m.HostPath = "/data", "/srv"
			cfg := &runtime.ContainerConfig{Mounts: []*runtime.Mount{c.m}}
			checkValidation(t, checkHandlerMounts(c.probe, "h", cfg), c.field)
		})
	}
}
