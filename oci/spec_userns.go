package oci

import (
	"fmt"
	"path/filepath"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// setUserNamespace puts a container of a pod with a user namespace of its
// own into that namespace, joined by its pinned path: the runtime reads the
// mappings from the namespace itself (runc 1.2 and later warn when they are
// given too). Every bind mount (volumes, the pod's files, its /dev/shm) is
// idmapped into that namespace, so that what root owns on the host appears
// owned by the pod's root, as the kubelet asks for each volume of a pod with
// hostUsers: false; but the host's /sys of a pod on the host's network
// (sysMount), which sysfs cannot idmap. The rootfs is idmapped when it is mounted
// (image.Store.MountRootfsIDMapped), not here.
func setUserNamespace(s *specs.Spec, c *ContainerSpec, _ hostFacts) error {
	// Only a pod's namespace is joined: a container never gets a user
	// namespace of its own, so the zero value (NamespaceNew) means the
	// host's, like NamespaceHost.
	if c.Namespaces.User.Mode != NamespaceJoin {
		return nil
	}
	if !filepath.IsAbs(c.Namespaces.User.Path) {
		return fmt.Errorf("%w: user namespace path %q is not absolute", ErrInvalid, c.Namespaces.User.Path)
	}
	s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace, Path: c.Namespaces.User.Path})
	for i := range s.Mounts {
		m := &s.Mounts[i]
		if m.Type != "bind" || (m.Destination == "/sys" && m.Source == hostSys && usesHostSys(c)) {
			continue
		}
		// "ridmap" maps the submounts of an rbind too.
		opt := "idmap"
		if slices.Contains(m.Options, "rbind") {
			opt = "ridmap"
		}
		m.Options = append(m.Options, opt)
	}
	return nil
}
