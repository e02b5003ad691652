package oci

import (
	"fmt"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// namespacesFor lists the namespaces the runtime creates or joins; a host
// namespace is one left out of the list.
func namespacesFor(ns Namespaces, h hostFacts) ([]specs.LinuxNamespace, error) {
	out := []specs.LinuxNamespace{{Type: specs.MountNamespace}}
	for _, n := range []struct {
		typ    specs.LinuxNamespaceType
		choice Namespace
	}{
		{specs.NetworkNamespace, ns.Network},
		{specs.IPCNamespace, ns.IPC},
		{specs.UTSNamespace, ns.UTS},
		{specs.PIDNamespace, ns.PID},
	} {
		entry, keep, err := namespaceEntry(n.typ, n.choice)
		if err != nil {
			return nil, err
		}
		if keep {
			out = append(out, entry)
		}
	}
	if h.cgroup2 {
		out = append(out, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	}
	return out, nil
}

func namespaceEntry(typ specs.LinuxNamespaceType, n Namespace) (specs.LinuxNamespace, bool, error) {
	switch n.Mode {
	case NamespaceNew:
		return specs.LinuxNamespace{Type: typ}, true, nil
	case NamespaceJoin:
		if !filepath.IsAbs(n.Path) {
			return specs.LinuxNamespace{}, false, fmt.Errorf("%w: %s namespace path %q is not absolute", ErrInvalid, typ, n.Path)
		}
		return specs.LinuxNamespace{Type: typ, Path: n.Path}, true, nil
	case NamespaceHost:
		return specs.LinuxNamespace{}, false, nil
	default:
		return specs.LinuxNamespace{}, false, fmt.Errorf("%w: unknown %s namespace mode %d", ErrInvalid, typ, n.Mode)
	}
}
