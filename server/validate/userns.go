package validate

import (
	"fmt"
	"math"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// maxIDMappings is what the kernel takes in one uid_map or gid_map
// (user_namespaces(7)).
const maxIDMappings = 340

// validateUserNamespace checks userns_options: NODE (the host's user
// namespace, what the kubelet sends for every pod without hostUsers: false)
// without mappings, or POD with the mappings of the pod's own user
// namespace. Whether the pod's handler can run it is checked where the
// handler is known (checkUserNamespaceHandler).
func validateUserNamespace(field string, u *runtime.UserNamespace) error {
	if u == nil {
		return nil
	}
	switch u.GetMode() {
	case runtime.NamespaceMode_NODE:
		if len(u.GetUids()) > 0 || len(u.GetGids()) > 0 {
			return Invalidf(field+".uids", "ID mappings need a user namespace of the pod's own (mode POD)")
		}
		return nil
	case runtime.NamespaceMode_POD:
		if err := validateIDMappings(field+".uids", u.GetUids()); err != nil {
			return err
		}
		return validateIDMappings(field+".gids", u.GetGids())
	case runtime.NamespaceMode_TARGET, runtime.NamespaceMode_CONTAINER:
		return Invalidf(field+".mode", "%v is not supported for a user namespace (NODE or POD): a pod's containers share one", u.GetMode())
	default:
		return Invalidf(field+".mode", "unknown user namespace mode %d", u.GetMode())
	}
}

// validateIDMappings checks what the kernel would refuse in a uid_map or
// gid_map, so that the error names the field instead of a failed write: at
// least one range, none empty or wrapping around, no two overlapping on
// either side. Mapping the host's root (host ID 0) into a pod would make
// its root the node's: refused, as the kubelet never asks for it.
func validateIDMappings(field string, maps []*runtime.IDMapping) error {
	if len(maps) == 0 {
		return Invalidf(field, "must map at least one range in a user namespace of the pod's own")
	}
	if len(maps) > maxIDMappings {
		return Invalidf(field, "has %d ranges, more than the kernel's %d", len(maps), maxIDMappings)
	}
	for i, m := range maps {
		if m == nil || m.GetLength() == 0 {
			return Invalidf(field, "range %d is empty", i)
		}
		if uint64(m.GetContainerId())+uint64(m.GetLength()) > math.MaxUint32 || uint64(m.GetHostId())+uint64(m.GetLength()) > math.MaxUint32 {
			return Invalidf(field, "range %d (%s) runs past the last ID", i, idRange(m))
		}
		if m.GetHostId() == 0 {
			return Invalidf(field, "range %d (%s) maps the host's root into the pod", i, idRange(m))
		}
		for j, o := range maps[:i] {
			if Overlaps(m.GetContainerId(), o.GetContainerId(), m.GetLength(), o.GetLength()) || Overlaps(m.GetHostId(), o.GetHostId(), m.GetLength(), o.GetLength()) {
				return Invalidf(field, "ranges %d (%s) and %d (%s) overlap", j, idRange(o), i, idRange(m))
			}
		}
	}
	return nil
}

func Overlaps(a, b, lenA, lenB uint32) bool {
	return uint64(a) < uint64(b)+uint64(lenB) && uint64(b) < uint64(a)+uint64(lenA)
}

func idRange(m *runtime.IDMapping) string {
	return fmt.Sprintf("container %d, host %d, length %d", m.GetContainerId(), m.GetHostId(), m.GetLength())
}

// validateMountIDMappings checks a mount's own mappings (the kubelet sends
// the pod's on every mount of a pod with hostUsers: false): both or none.
// That the container runs in a user namespace is checked with its pod.
func validateMountIDMappings(m *runtime.Mount) error {
	if err := validateIDMappings("config.mounts.uidMappings", m.GetUidMappings()); err != nil {
		return err
	}
	return validateIDMappings("config.mounts.gidMappings", m.GetGidMappings())
}

// PodUserNamespace is the pod's own user namespace request, or nil for the
// host's.
func PodUserNamespace(cfg *runtime.PodSandboxConfig) *runtime.UserNamespace {
	u := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
	if u.GetMode() != runtime.NamespaceMode_POD {
		return nil
	}
	return u
}

// validateContainerUserNamespace: a container runs in its pod's user
// namespace or, in a pod without one, the host's; it cannot pick another.
// The kubelet sends the pod's userns_options on each container. kernel
// says why this kernel cannot run a pod in a user namespace, or nil.
func validateContainerUserNamespace(sbCfg *runtime.PodSandboxConfig, c *runtime.ContainerConfig, kernel func() error) error {
	const field = "config.linux.security_context.namespace_options.userns_options"
	ctr := c.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
	pod := PodUserNamespace(sbCfg)
	switch {
	case ctr != nil && ctr.GetMode() == runtime.NamespaceMode_POD && pod == nil:
		return Invalidf(field+".mode", "POD in a pod without a user namespace of its own")
	case ctr != nil && ctr.GetMode() == runtime.NamespaceMode_NODE && pod != nil:
		return Invalidf(field+".mode", "NODE in a pod with a user namespace of its own: a container shares its pod's")
	}
	if ctr != nil && ctr.GetMode() == runtime.NamespaceMode_POD && (!sameIDMappings(ctr.GetUids(), pod.GetUids()) || !sameIDMappings(ctr.GetGids(), pod.GetGids())) {
		return Invalidf(field, "the container's mappings differ from its pod's: a container shares its pod's user namespace")
	}
	if pod != nil {
		// A pod made before a reboot into an older kernel.
		if err := kernel(); err != nil {
			return err
		}
	}
	for _, m := range c.GetMounts() {
		if len(m.GetUidMappings()) == 0 && len(m.GetGidMappings()) == 0 {
			continue
		}
		if pod == nil {
			return Invalidf("config.mounts.uidMappings", "ID-mapped mounts need a pod in a user namespace of its own (userns_options mode POD)")
		}
		// Every bind mount of such a pod is idmapped into its user
		// namespace (oci.setUserNamespace); other mappings would need a
		// namespace of their own for each mount.
		if !sameIDMappings(m.GetUidMappings(), pod.GetUids()) || !sameIDMappings(m.GetGidMappings(), pod.GetGids()) {
			return Invalidf("config.mounts.uidMappings", "mount %s: mappings other than the pod's user namespace's are not supported by minicri", m.GetContainerPath())
		}
	}
	return nil
}

func sameIDMappings(a, b []*runtime.IDMapping) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].GetContainerId() != b[i].GetContainerId() || a[i].GetHostId() != b[i].GetHostId() || a[i].GetLength() != b[i].GetLength() {
			return false
		}
	}
	return true
}
