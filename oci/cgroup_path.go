package oci

import (
	"fmt"
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
