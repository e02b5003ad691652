package oci

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"
)

// cgroupRelPath turns a spec cgroupsPath into the path under a hierarchy's
// root: as is for cgroupfs; for systemd, "a-b.slice:prefix:name" becomes
// "/a.slice/a-b.slice/prefix-name.scope", as systemd lays out slices.
func cgroupRelPath(cgroupsPath string, driver CgroupDriver) (string, error) {
	switch driver {
	case "", CgroupfsDriver:
		return filepath.Join("/", cgroupsPath), nil
	case SystemdDriver:
		parts := strings.Split(cgroupsPath, ":")
		if len(parts) != 3 {
			return "", fmt.Errorf("%w: systemd cgroups path %q is not slice:prefix:name", ErrInvalid, cgroupsPath)
		}
		slice, err := expandSlice(parts[0])
		if err != nil {
			return "", err
		}
		return filepath.Join(slice, parts[1]+"-"+parts[2]+".scope"), nil
	default:
		return "", fmt.Errorf("%w: unknown cgroup driver %q", ErrInvalid, driver)
	}
}

// SystemdSlice is the slice name of a pod's cgroup parent under the systemd
// driver. The kubelet sends the whole path
// ("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice");
// crictl and older clients the name alone. Like containerd and cri-o, the
// last element is the slice; a path must be exactly that slice's
// expansion, so a parent cannot point anywhere but where systemd puts the
// slice it names.
func SystemdSlice(parent string) (string, error) {
	slice := parent
	if strings.Contains(parent, "/") {
		slice = path.Base(parent)
	}
	if !validSliceName(slice) {
		return "", fmt.Errorf("%w: cgroup parent %q must be a systemd slice (x-y.slice, or its path /x.slice/x-y.slice) with the systemd cgroup driver", ErrInvalid, parent)
	}
	if slice == parent {
		return slice, nil
	}
	want, err := expandSlice(slice)
	if err != nil {
		return "", err
	}
	if "/"+strings.TrimPrefix(parent, "/") != want {
		return "", fmt.Errorf("%w: cgroup parent %q is not where systemd puts slice %s (%s)", ErrInvalid, parent, slice, want)
	}
	return slice, nil
}

// validSliceName: a systemd slice unit name of the characters systemd
// keeps in unit names, without the ':' that separates a cgroupsPath's
// fields.
func validSliceName(s string) bool {
	name, ok := strings.CutSuffix(s, ".slice")
	if !ok || name == "" || strings.HasPrefix(name, ".") {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '\\') {
			return false
		}
	}
	return true
}

// expandSlice maps "a-b-c.slice" to "/a.slice/a-b.slice/a-b-c.slice".
func expandSlice(slice string) (string, error) {
	name, ok := strings.CutSuffix(slice, ".slice")
	if !ok || name == "" || strings.Contains(name, "/") {
		return "", fmt.Errorf("%w: %q is not a systemd slice name", ErrInvalid, slice)
	}
	if name == "-" {
		return "/", nil
	}
	out, prefix := "/", ""
	for _, part := range strings.Split(name, "-") {
		if part == "" {
			return "", fmt.Errorf("%w: %q is not a systemd slice name", ErrInvalid, slice)
		}
		prefix += part
		out = filepath.Join(out, prefix+".slice")
		prefix += "-"
	}
	return out, nil
}
