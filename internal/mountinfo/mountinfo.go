// Package mountinfo finds the mount that holds a path: the image store
// (which filesystem it uses), the network package (whether a pin directory
// propagates) and the spec generator (whether a bind source can propagate)
// all need it. The mount table is read by github.com/moby/sys/mountinfo;
// this wrapper only adds the one question that library does not answer:
// its ParentsFilter compares strings ("/run" would hold "/runner") and
// leaves the caller to pick the deepest mount, and the topmost of those
// stacked on one point.
package mountinfo

import (
	"fmt"
	"os"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// Path is the calling process's mount table.
const Path = "/proc/self/mountinfo"

// Lookup finds the mount that holds path in the mountinfo file at table:
// the deepest mount point wins, and of mounts on the same point the last
// listed, which is stacked on top. path must be resolved (no symlinks).
func Lookup(table, path string) (*mountinfo.Info, error) {
	f, err := os.Open(table)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mounts, err := mountinfo.GetMountsFromReader(f, func(m *mountinfo.Info) (skip, stop bool) {
		return !Within(path, m.Mountpoint), false
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	var best *mountinfo.Info
	for _, m := range mounts {
		if best == nil || len(m.Mountpoint) >= len(best.Mountpoint) {
			best = m
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no mount holds %s", path)
	}
	return best, nil
}

// Below lists the mounts at or below dir (resolved) in the mountinfo file
// at table.
func Below(table, dir string) ([]*mountinfo.Info, error) {
	f, err := os.Open(table)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mounts, err := mountinfo.GetMountsFromReader(f, mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	return mounts, nil
}

// Shared reports whether the mount propagates to a peer group.
func Shared(m *mountinfo.Info) bool { return strings.Contains(m.Optional, "shared:") }

// Slave reports whether the mount receives from a master group.
func Slave(m *mountinfo.Info) bool { return strings.Contains(m.Optional, "master:") }

// Within reports whether path is dir or below it.
func Within(path, dir string) bool {
	return dir == "/" || path == dir || strings.HasPrefix(path, dir+"/")
}
