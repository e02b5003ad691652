package oci

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestUserNamespaceJoinsThePodsAndIDMapsBindMounts(t *testing.T) {
	c := minimalSpec(t)
	c.HostsPath = "/run/pod/hosts"
	c.ShmPath = "/run/pod/shm"
	c.Mounts = []Mount{{ContainerPath: "/data", HostPath: t.TempDir()}}
	c.Namespaces.User = Namespace{Mode: NamespaceJoin, Path: "/run/pod/ns/user"}
	s := mustGenerate(t, c, testHost())
	i := slices.IndexFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.UserNamespace })
	if i < 0 || s.Linux.Namespaces[i].Path != "/run/pod/ns/user" {
		t.Fatalf("namespaces %+v: want the pod's user namespace joined by path", s.Linux.Namespaces)
	}
	if len(s.Linux.UIDMappings) > 0 || len(s.Linux.GIDMappings) > 0 {
		t.Errorf("mappings given with a joined user namespace: runc reads them from it")
	}
	binds := 0
	for _, m := range s.Mounts {
		idmapped := slices.Contains(m.Options, "idmap") || slices.Contains(m.Options, "ridmap")
		if m.Type == "bind" {
			binds++
			if !idmapped {
				t.Errorf("bind mount %s is not idmapped: %v", m.Destination, m.Options)
			}
		} else if idmapped {
			t.Errorf("%s mount %s is idmapped", m.Type, m.Destination)
		}
	}
	if binds < 3 {
		t.Errorf("%d bind mounts, want the volume, /etc/hosts and /dev/shm", binds)
	}

	// Without one (any other mode), neither.
	c.Namespaces.User = Namespace{}
	s = mustGenerate(t, c, testHost())
	for _, n := range s.Linux.Namespaces {
		if n.Type == specs.UserNamespace {
			t.Errorf("a user namespace without a pod's: %+v", n)
		}
	}
	for _, m := range s.Mounts {
		if slices.Contains(m.Options, "idmap") || slices.Contains(m.Options, "ridmap") {
			t.Errorf("mount %s idmapped without a user namespace", m.Destination)
		}
	}
}
