package oci

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// OOMKilled reports whether the kernel's OOM killer killed a process of the
// container's memory cgroup. Call it after the container exits and before the
// runtime's delete removes the cgroup. cgroupsPath is the spec's
// linux.cgroupsPath for the given driver. A cgroup that is gone is ErrNotFound.
//
// cgroup v1 counts kills in memory.oom_control, v2 in memory.events; a hybrid
// host (v1 controllers, a v2 tree beside them) keeps memory on v1.
func OOMKilled(cgroupsPath string, driver CgroupDriver) (bool, error) {
	rel, err := cgroupRelPath(cgroupsPath, driver)
	if err != nil {
		return false, err
	}
	return oomKilledIn(cgroupRoot, currentHost().cgroup2, rel)
}

func oomKilledIn(root string, cgroup2 bool, rel string) (bool, error) {
	file := filepath.Join(root, "memory", rel, "memory.oom_control")
	if cgroup2 {
		file = filepath.Join(root, rel, "memory.events")
	}
	n, err := readCounter(file, "oom_kill")
	if errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("memory cgroup %s: %w", rel, ErrNotFound)
	}
	if err != nil {
		return false, fmt.Errorf("read OOM kills of cgroup %s: %w", rel, err)
	}
	return n > 0, nil
}

// readCounter finds "key N" in a cgroup's flat keyed file; a kernel that does
// not count the key gives 0.
func readCounter(file, key string) (uint64, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, sc.Err()
}

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
