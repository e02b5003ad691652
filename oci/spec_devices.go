package oci

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// defaultDeviceRules deny every device, then allow the nodes every container
// has (null, zero, full, random, urandom, tty, console, ptmx, the pts). runc adds
// the same allowances itself; listing them keeps other runtimes identical.
func defaultDeviceRules() []specs.LinuxDeviceCgroup {
	rule := func(typ string, major, minor int64, access string) specs.LinuxDeviceCgroup {
		r := specs.LinuxDeviceCgroup{Allow: true, Type: typ, Access: access}
		if major >= 0 {
			r.Major = &major
		}
		if minor >= 0 {
			r.Minor = &minor
		}
		return r
	}
	return []specs.LinuxDeviceCgroup{
		{Allow: false, Access: "rwm"},
		rule("c", 1, 3, "rwm"),    // null
		rule("c", 1, 5, "rwm"),    // zero
		rule("c", 1, 7, "rwm"),    // full
		rule("c", 1, 8, "rwm"),    // random
		rule("c", 1, 9, "rwm"),    // urandom
		rule("c", 5, 0, "rwm"),    // tty
		rule("c", 5, 1, "rwm"),    // console
		rule("c", 5, 2, "rwm"),    // ptmx
		rule("c", 136, -1, "rwm"), // pts
		rule("c", -1, -1, "m"),    // mknod of char devices, still unusable
		rule("b", -1, -1, "m"),    // mknod of block devices, still unusable
	}
}

// devicesFor builds the device nodes and their cgroup rules. A privileged
// container gets every host device and an allow-all rule, as with containerd.
func devicesFor(c *ContainerSpec) ([]specs.LinuxDevice, []specs.LinuxDeviceCgroup, error) {
	rules := defaultDeviceRules()
	var nodes []specs.LinuxDevice
	if c.Security.Privileged {
		host, err := hostDevices("/dev")
		if err != nil {
			return nil, nil, err
		}
		nodes = host
		rules = []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}
	}
	for _, d := range c.Devices {
		dn, dr, err := containerDevice(d)
		if err != nil {
			return nil, nil, err
		}
		nodes = append(nodes, dn...)
		if !c.Security.Privileged {
			rules = append(rules, dr...)
		}
	}
	return nodes, rules, nil
}

// containerDevice stats a host device, or every device under a host
// directory (e.g. /dev/snd), and maps it to the container path.
func containerDevice(d Device) ([]specs.LinuxDevice, []specs.LinuxDeviceCgroup, error) {
	access, err := devicePermissions(d.Permissions)
	if err != nil {
		return nil, nil, err
	}
	containerPath := d.ContainerPath
	if containerPath == "" {
		containerPath = d.HostPath
	}
	if !path.IsAbs(containerPath) {
		return nil, nil, fmt.Errorf("%w: device container path %q is not absolute", ErrInvalid, containerPath)
	}
	hostPath, err := filepath.EvalSymlinks(d.HostPath)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: device %s: %v", ErrInvalid, d.HostPath, err)
	}
	fi, err := os.Stat(hostPath)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: device %s: %v", ErrInvalid, d.HostPath, err)
	}
	var nodes []specs.LinuxDevice
	if fi.IsDir() {
		nodes, err = hostDevices(hostPath)
		if err != nil {
			return nil, nil, err
		}
		for i := range nodes {
			rel, _ := filepath.Rel(hostPath, nodes[i].Path)
			nodes[i].Path = path.Join(containerPath, rel)
		}
	} else {
		node, err := deviceFromPath(hostPath)
		if err != nil {
			return nil, nil, err
		}
		node.Path = path.Clean(containerPath)
		nodes = []specs.LinuxDevice{node}
	}
	rules := make([]specs.LinuxDeviceCgroup, 0, len(nodes))
	for _, n := range nodes {
		major, minor := n.Major, n.Minor
		rules = append(rules, specs.LinuxDeviceCgroup{Allow: true, Type: n.Type, Major: &major, Minor: &minor, Access: access})
	}
	return nodes, rules, nil
}

func devicePermissions(p string) (string, error) {
	if p == "" {
		return "rwm", nil
	}
	for _, r := range p {
		if !strings.ContainsRune("rwm", r) {
			return "", fmt.Errorf("%w: device permissions %q: only r, w and m are allowed", ErrInvalid, p)
		}
	}
	return p, nil
}

// errNotDevice marks a path that is not a character or block device.
var errNotDevice = fmt.Errorf("%w: not a device node", ErrInvalid)

// deviceFromPath makes a spec device from a host node, keeping its type,
// numbers, mode and owner. The path is the host path; callers replace it.
func deviceFromPath(hostPath string) (specs.LinuxDevice, error) {
	var st unix.Stat_t
	if err := unix.Stat(hostPath, &st); err != nil {
		return specs.LinuxDevice{}, fmt.Errorf("%w: device %s: %v", ErrInvalid, hostPath, err)
	}
	var typ string
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		typ = "c"
	case unix.S_IFBLK:
		typ = "b"
	default:
		return specs.LinuxDevice{}, fmt.Errorf("device %s: %w", hostPath, errNotDevice)
	}
	mode := os.FileMode(st.Mode & 0o7777)
	uid, gid := st.Uid, st.Gid
	return specs.LinuxDevice{
		Path:     hostPath,
		Type:     typ,
		Major:    int64(unix.Major(uint64(st.Rdev))),
		Minor:    int64(unix.Minor(uint64(st.Rdev))),
		FileMode: &mode,
		UID:      &uid,
		GID:      &gid,
	}, nil
}

// hostDeviceSkips are directories under /dev whose nodes belong to the host's
// own pty, shm and mqueue instances; the container mounts its own.
var hostDeviceSkips = map[string]bool{"pts": true, "shm": true, "mqueue": true, "fd": true, ".lxc": true, ".udev": true}

// hostDevices lists every device node under dir, skipping what the container
// must not share (its console and pty instances).
func hostDevices(dir string) ([]specs.LinuxDevice, error) {
	var out []specs.LinuxDevice
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil // a node that vanished mid-walk is no reason to fail
		}
		if e.IsDir() {
			if p != dir && hostDeviceSkips[e.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if e.Type()&fs.ModeDevice == 0 || e.Name() == "console" {
			return nil
		}
		d, err := deviceFromPath(p)
		if err != nil {
			return nil
		}
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list devices under %s: %w", dir, err)
	}
	return out, nil
}
