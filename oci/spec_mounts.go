package oci

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// DefaultMaskedPaths are hidden from unprivileged containers: they leak host
// information or let a process poke the kernel.
var DefaultMaskedPaths = []string{
	"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
	"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
	"/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
}

// DefaultReadonlyPaths are read-only in unprivileged containers.
var DefaultReadonlyPaths = []string{
	"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
}

// shmSize is the size of a private /dev/shm, as Docker and containerd give.
const shmSize = "size=65536k"

// mountsFor builds the mount list: the standard mounts, the pod's files
// (/etc/hosts, resolv.conf, hostname), then the CRI mounts, parents before
// children. A CRI mount on a standard or pod-file path replaces it.
func mountsFor(c *ContainerSpec, h hostFacts) ([]specs.Mount, error) {
	user, err := userMounts(c.Mounts, h)
	if err != nil {
		return nil, err
	}
	taken := make(map[string]bool, len(user))
	userDev := false
	for _, m := range user {
		taken[m.Destination] = true
		userDev = userDev || m.Destination == "/dev"
	}
	var out []specs.Mount
	for _, m := range append(standardMounts(c), podFileMounts(c)...) {
		if taken[m.Destination] || (userDev && strings.HasPrefix(m.Destination, "/dev/")) {
			continue
		}
		out = append(out, m)
	}
	return append(out, user...), nil
}

func standardMounts(c *ContainerSpec) []specs.Mount {
	sysMode := "ro"
	if c.Security.Privileged {
		sysMode = "rw"
	}
	return []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		shmMount(c),
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		sysMount(c, sysMode),
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", sysMode}},
	}
}

// sysMount is a fresh sysfs, read-only unless the container is privileged.
// A container in its pod's user namespace on the host's network
// (KEP-5607) cannot mount one: the kernel lets only a user namespace that
// owns the network namespace mount sysfs, and the host's does not belong
// to the pod's. It gets the host's sysfs instead, as containerd 2.x and
// cri-o do; its /sys/class/net shows the host's interfaces, which is what
// a hostNetwork pod sees. Unlike theirs, the bind is of the sysfs alone,
// without the host's mounts below /sys (its cgroup tree among them), as a
// fresh sysfs has none; and it is made by the monitor, read-only, in a
// mount namespace of the initial user namespace (StageHostSys), so that
// it reaches the container locked. Never idmapped (sysfs cannot be) and
// never writable: the pod's root is no one on the host.
func sysMount(c *ContainerSpec, sysMode string) specs.Mount {
	if usesHostSys(c) {
		return specs.Mount{Destination: "/sys", Type: "bind", Source: hostSys, Options: []string{"bind", "rprivate", "nosuid", "noexec", "nodev", "ro"}}
	}
	return specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", sysMode}}
}

// hostSys is the host's sysfs, bound by sysMount.
const hostSys = "/sys"

// usesHostSys: the container is in a user namespace of its pod's and on
// the host's network.
func usesHostSys(c *ContainerSpec) bool {
	return c.Namespaces.User.Mode == NamespaceJoin && c.Namespaces.Network.Mode == NamespaceHost
}

// StageHostSys points the host's /sys of s (sysMount) at stage, where the
// monitor binds it read-only in the runtime's create's mount namespace
// (conmon.Options.SysStage), and reports whether s had one. Left on the
// host's /sys, the runtime's bind would fail: in the container's
// namespace the mounts below it are locked, and a bind without them is
// refused. Done after NRI, so that plugins see the host's /sys.
func StageHostSys(s *specs.Spec, stage string) bool {
	for i := range s.Mounts {
		m := &s.Mounts[i]
		if m.Destination == "/sys" && m.Type == "bind" && m.Source == hostSys {
			m.Source = stage
			return true
		}
	}
	return false
}

// shmMount shares the host's /dev/shm with a host-IPC container, the pod's with
// a pod member, else gives a private tmpfs.
func shmMount(c *ContainerSpec) specs.Mount {
	source := c.ShmPath
	if c.Namespaces.IPC.Mode == NamespaceHost {
		source = "/dev/shm"
	}
	if source == "" {
		return specs.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm",
			Options: []string{"nosuid", "noexec", "nodev", "mode=1777", shmSize}}
	}
	return specs.Mount{Destination: "/dev/shm", Type: "bind", Source: source,
		Options: []string{"rbind", "rprivate", "nosuid", "noexec", "nodev", "rw"}}
}

// podFileMounts binds the files the server wrote for the pod; they are
// read-only when the root filesystem is, as containerd does.
func podFileMounts(c *ContainerSpec) []specs.Mount {
	mode := "rw"
	if c.Security.ReadonlyRootfs {
		mode = "ro"
	}
	var out []specs.Mount
	for _, f := range []struct{ dest, source string }{
		{"/etc/hostname", c.HostnamePath},
		{"/etc/hosts", c.HostsPath},
		{"/etc/resolv.conf", c.ResolvConfPath},
	} {
		if f.source != "" {
			out = append(out, specs.Mount{Destination: f.dest, Type: "bind", Source: f.source,
				Options: []string{"rbind", "rprivate", mode}})
		}
	}
	return out
}

// userMounts turns CRI mounts into bind mounts, parents before children so
// that a mount on /data/x is not hidden by a later mount on /data.
func userMounts(mounts []Mount, h hostFacts) ([]specs.Mount, error) {
	out := make([]specs.Mount, 0, len(mounts))
	for _, m := range mounts {
		sm, err := bindMount(m, h)
		if err != nil {
			return nil, err
		}
		out = append(out, sm)
	}
	slices.SortStableFunc(out, func(a, b specs.Mount) int {
		return pathDepth(a.Destination) - pathDepth(b.Destination)
	})
	return out, nil
}

func bindMount(m Mount, h hostFacts) (specs.Mount, error) {
	if !path.IsAbs(m.ContainerPath) {
		return specs.Mount{}, fmt.Errorf("%w: mount container path %q is not absolute", ErrInvalid, m.ContainerPath)
	}
	source, err := prepareMountSource(m.HostPath)
	if err != nil {
		return specs.Mount{}, err
	}
	propagation, err := propagationOption(m.Propagation)
	if err != nil {
		return specs.Mount{}, err
	}
	if err := checkSourcePropagation(h.mountInfo, source, m.Propagation); err != nil {
		return specs.Mount{}, err
	}
	mode, err := mountMode(m)
	if err != nil {
		return specs.Mount{}, err
	}
	options := []string{"rbind", propagation, mode}
	if m.Inert {
		options = append(options, "nosuid", "nodev")
	}
	if options, err = withBindOptions(options, m); err != nil {
		return specs.Mount{}, err
	}
	return specs.Mount{
		Destination: path.Clean(m.ContainerPath),
		Type:        "bind",
		Source:      source,
		Options:     options,
	}, nil
}

// BindOptions are the options a request may add to a bind mount
// (Mount.mount_options, KEP-5855). Each only takes from the container: the
// runtime ORs them into the flags of the one remount that also applies
// "ro", and no option of the list clears another or the mode ("exec",
// "suid", "dev", "rw" are not in it), so no request can undo a protection
// the runtime chose. They apply to the bind's top mount, as "ro" does:
// submounts that rbind copied keep their own flags.
var BindOptions = []string{"noexec", "nodev", "nosuid"}

// withBindOptions appends m's requested options to a bind's options, each
// once: a request that repeats one costs nothing more in the spec.
func withBindOptions(options []string, m Mount) ([]string, error) {
	for _, o := range m.Options {
		if !slices.Contains(BindOptions, o) {
			return nil, fmt.Errorf("%w: mount %s: option %q is not one of %s", ErrInvalid, m.ContainerPath, o, strings.Join(BindOptions, ", "))
		}
		if !slices.Contains(options, o) {
			options = append(options, o)
		}
	}
	return options, nil
}

// mountMode is the mount's access option. "rro" stands instead of "ro",
// as containerd writes it: runc applies it with mount_setattr(AT_RECURSIVE),
// which also reaches the mounts below the source that rbind copied. Only a
// private mount can be made recursively read-only: a slave or shared one
// would get writable mounts from the host later.
func mountMode(m Mount) (string, error) {
	switch {
	case m.RecursiveReadOnly && !m.Readonly:
		return "", fmt.Errorf("%w: recursive read-only mount %s must be read-only", ErrInvalid, m.ContainerPath)
	case m.RecursiveReadOnly && m.Propagation != PropagationPrivate:
		return "", fmt.Errorf("%w: recursive read-only mount %s must have private propagation", ErrInvalid, m.ContainerPath)
	case m.RecursiveReadOnly:
		return "rro", nil
	case m.Readonly:
		return "ro", nil
	}
	return "rw", nil
}

// prepareMountSource creates a missing host directory, as containerd and the
// Docker shim did (the kubelet relies on it for some volume types), and
// resolves symlinks so that the runtime binds what the path means now.
func prepareMountSource(hostPath string) (string, error) {
	if !filepath.IsAbs(hostPath) {
		return "", fmt.Errorf("%w: mount host path %q is not absolute", ErrInvalid, hostPath)
	}
	if _, err := os.Stat(hostPath); os.IsNotExist(err) {
		if err := os.MkdirAll(hostPath, 0o755); err != nil {
			return "", fmt.Errorf("create mount source %s: %w", hostPath, err)
		}
	}
	resolved, err := filepath.EvalSymlinks(hostPath)
	if err != nil {
		return "", fmt.Errorf("resolve mount source %s: %w", hostPath, err)
	}
	return resolved, nil
}

func propagationOption(p Propagation) (string, error) {
	switch p {
	case PropagationPrivate:
		return "rprivate", nil
	case PropagationHostToContainer:
		return "rslave", nil
	case PropagationBidirectional:
		return "rshared", nil
	default:
		return "", fmt.Errorf("%w: unknown mount propagation %d", ErrInvalid, p)
	}
}

// rootfsPropagation must let a slave or shared bind mount keep its
// propagation: the root's propagation bounds the mounts below it.
func rootfsPropagation(mounts []Mount) string {
	out := ""
	for _, m := range mounts {
		switch m.Propagation {
		case PropagationBidirectional:
			return "rshared"
		case PropagationHostToContainer:
			out = "rslave"
		}
	}
	return out
}

func pathDepth(p string) int {
	p = path.Clean(p)
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}
