package network

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/osthread"
)

// PinProcessNamespaces pins namespaces that a process made, for a pod with
// a user namespace of its own: the process (started in a new user namespace
// with the pod's mappings, and new namespaces of the other kinds, which the
// user namespace then owns) cannot be replaced by a thread of the daemon,
// since no thread of a multi-threaded process can enter a new user
// namespace. Owned by the pod's user namespace, the network, IPC and UTS
// namespaces let the pod's root mount sysfs and mqueue and set sysctls, as
// in containerd and cri-o. kinds must include NamespaceUser. The hostname
// and lo are set up from a throwaway thread that joins the pinned
// namespaces; the process may end once this returns. On failure nothing
// is left behind; UnpinNamespaces undoes a success.
func PinProcessNamespaces(dir string, pid int, kinds []NamespaceKind, hostname string) (Namespaces, error) {
	if dir == "" || pid <= 0 {
		return Namespaces{}, fmt.Errorf("pin namespaces of process %d in %q: no process or directory", pid, dir)
	}
	flags, err := unshareFlags(kinds)
	if err != nil {
		return Namespaces{}, err
	}
	if flags&unix.CLONE_NEWUSER == 0 {
		return Namespaces{}, errors.New("pin namespaces of a process: only for a user namespace (else PinNamespaces)")
	}
	return pin(dir, flags, hostname, true, func(ns Namespaces) error { return bindProcessNamespaces(ns, pid, hostname) })
}

// bindProcessNamespaces bind-mounts the namespaces of pid onto the pin files
// of ns, then sets the hostname and brings up lo in them.
func bindProcessNamespaces(ns Namespaces, pid int, hostname string) error {
	for _, k := range pinnableKinds {
		target := ns.Path(k.kind)
		if target == "" {
			continue
		}
		source := "/proc/" + strconv.Itoa(pid) + "/ns/" + string(k.kind)
		if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("pin namespaces: bind %s onto %s: %w", source, target, err)
		}
	}
	if ns.UTS != "" && hostname != "" {
		err := osthread.Throwaway(func() error {
			if err := joinNamespace(ns.UTS, unix.CLONE_NEWUTS); err != nil {
				return err
			}
			return unix.Sethostname([]byte(hostname))
		})
		if err != nil {
			return fmt.Errorf("pin namespaces: set hostname %q: %w", hostname, err)
		}
	}
	if ns.Net != "" {
		err := osthread.Throwaway(func() error {
			if err := joinNamespace(ns.Net, unix.CLONE_NEWNET); err != nil {
				return err
			}
			return bringUpLoopback()
		})
		if err != nil {
			return fmt.Errorf("pin namespaces: %w", err)
		}
	}
	return nil
}

// joinNamespace moves the calling (throwaway) thread into the namespace at path.
func joinNamespace(path string, nstype int) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, nstype); err != nil {
		return fmt.Errorf("join %s: %w", path, err)
	}
	return nil
}
