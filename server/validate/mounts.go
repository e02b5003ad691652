package validate

import (
	"path/filepath"
	"slices"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/oci"
)

// The field rules of a container's mounts: host paths, propagation, image
// volumes, and what the node can mount.

// validateMountSupported refuses the mount fields minicri cannot honour.
// The kubelet sets none of them for an ordinary volume: recursive_read_only
// only when the runtime reports the feature (whether the handler's runtime
// has it is checked at create, see checkHandlerMounts), ID mappings only
// with a user namespace, mount_options only when the runtime reports the
// feature (and then only noexec, nodev, nosuid: validateMountOptions).
func validateMountSupported(m *runtime.Mount, selinux bool) error {
	if len(m.GetUidMappings()) > 0 || len(m.GetGidMappings()) > 0 {
		if err := validateMountIDMappings(m); err != nil {
			return err
		}
	}
	switch {
	case m.GetRecursiveReadOnly() && !m.GetReadonly():
		return Invalidf("config.mounts.recursive_read_only", "mount %s is recursively read-only but not read-only (readonly: false)", m.GetContainerPath())
	case m.GetRecursiveReadOnly() && m.GetPropagation() != runtime.MountPropagation_PROPAGATION_PRIVATE:
		// A slave or shared mount would receive writable mounts from the
		// host after it was made read-only.
		return Invalidf("config.mounts.recursive_read_only", "mount %s is recursively read-only but its propagation is %v, not private", m.GetContainerPath(), m.GetPropagation())
	case len(m.GetMountOptions()) > 0:
		if err := validateMountOptions(m); err != nil {
			return err
		}
	case m.GetSelinuxRelabel() && selinux:
		return Invalidf("config.mounts.selinux_relabel", "SELinux relabeling is not supported by minicri, and this host runs SELinux")
	}
	return nil
}

// validateMountOptions takes the bind mount options of KEP-5855: noexec,
// nodev, nosuid, which only take from the container (oci.BindOptions says
// how they are applied). Anything else is refused, never dropped: "rw" or
// "exec" would undo what the runtime chose, "suid" or "dev" would give a
// pod what the node withholds. Whether the pod's handler can apply them is
// checked at create (checkHandlerMounts).
func validateMountOptions(m *runtime.Mount) error {
	for _, o := range m.GetMountOptions() {
		if !slices.Contains(oci.BindOptions, o) {
			return Invalidf("config.mounts.mount_options", "mount %s: option %q is not allowed (only %s)", m.GetContainerPath(), o, strings.Join(oci.BindOptions, ", "))
		}
	}
	return nil
}

func validateMount(m *runtime.Mount) error {
	if m == nil {
		return Invalidf("config.mounts", "has a null entry")
	}
	if err := validateHostPath("config.mounts.container_path", m.GetContainerPath()); err != nil {
		return err
	}
	if m.GetImage().GetImage() != "" {
		return validateImageMount(m)
	}
	if m.GetImageSubPath() != "" {
		return Invalidf("config.mounts.image_sub_path", "%q needs an image volume (config.mounts.image)", m.GetImageSubPath())
	}
	if err := validateHostPath("config.mounts.host_path", m.GetHostPath()); err != nil {
		return err
	}
	return validatePropagation(m.GetPropagation())
}

// validatePropagation refuses a mount propagation the CRI does not define.
func validatePropagation(p runtime.MountPropagation) error {
	if _, ok := runtime.MountPropagation_name[int32(p)]; !ok {
		return Invalidf("config.mounts.propagation", "unknown propagation %d", p)
	}
	return nil
}

// validateImageMount checks an image volume (KEP-4639): an image, mounted
// read-only, all of it or the directory image_sub_path names in it. It has
// no host path: the image is the source.
func validateImageMount(m *runtime.Mount) error {
	if err := ImageRef("config.mounts.image.image", m.GetImage().GetImage()); err != nil {
		return err
	}
	if m.GetHostPath() != "" {
		return Invalidf("config.mounts.host_path", "%q: an image volume has no host path", m.GetHostPath())
	}
	if !m.GetReadonly() {
		// An image is shared by every container that mounts it.
		return Invalidf("config.mounts.readonly", "image volume %s must be read-only", m.GetContainerPath())
	}
	if p := m.GetImageSubPath(); p != "" {
		if filepath.IsAbs(p) {
			return Invalidf("config.mounts.image_sub_path", "%q must be relative to the image's root", p)
		}
		if err := validateCleanPath("config.mounts.image_sub_path", p); err != nil {
			return err
		}
	}
	return validatePropagation(m.GetPropagation())
}
