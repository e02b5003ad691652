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

// A container in its pod's user namespace on the host's network (KEP-5607)
// gets the host's sysfs, bound alone (none of the host's mounts below it),
// read-only and inert, never idmapped; with a network namespace of the
// pod's, or without a user namespace, a fresh sysfs as ever. Privileged or
// not, the bind stays read-only.
func TestSysMount(t *testing.T) {
	hostSysBind := specs.Mount{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"bind", "rprivate", "nosuid", "noexec", "nodev", "ro"}}
	freshSysfs := func(mode string) specs.Mount {
		return specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", mode}}
	}
	userns := Namespace{Mode: NamespaceJoin, Path: "/run/pod/ns/user"}
	podNet := Namespace{Mode: NamespaceJoin, Path: "/run/pod/ns/net"}
	host := Namespace{Mode: NamespaceHost}
	cases := []struct {
		name       string
		user, net  Namespace
		privileged bool
		want       specs.Mount
	}{
		{"userns, host network", userns, host, false, hostSysBind},
		{"userns, host network, privileged", userns, host, true, hostSysBind},
		{"userns, pod network", userns, podNet, false, freshSysfs("ro")},
		{"host userns, host network", host, host, false, freshSysfs("ro")},
		{"host userns, host network, privileged", host, host, true, freshSysfs("rw")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := minimalSpec(t)
			c.Namespaces.User, c.Namespaces.Network = tc.user, tc.net
			c.Security.Privileged = tc.privileged
			s := mustGenerate(t, c, testHost())
			got, _ := mountByDest(s.Mounts, "/sys")
			if got.Type != tc.want.Type || got.Source != tc.want.Source || !slices.Equal(got.Options, tc.want.Options) {
				t.Errorf("/sys mount %+v, want %+v", got, tc.want)
			}
			if cg, ok := mountByDest(s.Mounts, "/sys/fs/cgroup"); !ok || cg.Type != "cgroup" {
				t.Errorf("/sys/fs/cgroup mount %+v, want the container's cgroups", cg)
			}
			staged := StageHostSys(s, "/run/minicri-sys")
			got, _ = mountByDest(s.Mounts, "/sys")
			if want := tc.want.Type == "bind"; staged != want || want && got.Source != "/run/minicri-sys" {
				t.Errorf("StageHostSys = %v, /sys from %q; want %v and the stage when bound", staged, got.Source, want)
			}
		})
	}
}
