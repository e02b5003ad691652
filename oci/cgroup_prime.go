package oci

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// A runtime's create or exec moves a process into the container's cgroup.
// Every such move takes the kernel's global cgroup migration lock for
// writing, and the first writer after a quiet spell waits for an RCU grace
// period before it gets it, often the largest part of a CreateContainer
// above `runc run` (make bench shows it). A writer that
// comes while another waits shares its grace period, and one that comes
// within a grace period after the last writer left waits for none.
//
// PrimeCgroupMove makes such a move early, in the background, while the
// daemon starts the monitor and runc starts up, so that runc's own move
// finds the lock ready. The move is the daemon's
// process into the cgroup it is already in: the kernel takes the lock and
// moves nothing. It is only a head start: when it fails (no cgroup file to
// write, no permission), the runtime's move waits as it would anyway.
func (r *Runtime) PrimeCgroupMove() { primeCgroupMove() }

// primeInFlight lets one prime run at a time: the kernel takes the lock for
// all of them, so a second one would only wait for the first.
var primeInFlight atomic.Bool

func primeCgroupMove() {
	if !primeInFlight.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer primeInFlight.Store(false)
		_ = moveSelfToOwnCgroup("/proc/self/cgroup", cgroupRoot)
	}()
}

// moveSelfToOwnCgroup writes this process's PID to the cgroup.procs of the
// cgroup it is in. The cgroup is read anew each time, so that a daemon that
// an operator moved to another cgroup is never moved back.
func moveSelfToOwnCgroup(procFile, root string) error {
	data, err := os.ReadFile(procFile)
	if err != nil {
		return err
	}
	path := ownProcsFile(string(data), root)
	if path == "" {
		return errors.New("no cgroup hierarchy of this process is mounted under " + root)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(strconv.Itoa(os.Getpid()))
	if err := f.Close(); werr == nil {
		werr = err
	}
	return werr
}

// ownProcsFile picks, from the lines of a /proc/PID/cgroup file, the
// cgroup.procs file of the process's cgroup in the first hierarchy mounted
// under root: a v1 hierarchy ("4:memory:/p" at root/memory/p, "2:cpu,cpuacct:/p"
// at root/cpu,cpuacct/p, "1:name=systemd:/p" at root/systemd/p), or the
// v2 one ("0::/p" at root/p, or at root/unified/p beside v1 hierarchies).
// Any hierarchy will do: the kernel's migration lock is one for all.
func ownProcsFile(procCgroup, root string) string {
	for line := range strings.Lines(procCgroup) {
		id, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		controllers, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		// Each candidate is checked to be a hierarchy of the line's kind,
		// so that a v2 path never lands in a v1 hierarchy of that name.
		var dirs []string
		if id == "0" {
			dirs = []string{root, filepath.Join(root, "unified")}
		} else {
			dirs = []string{filepath.Join(root, strings.TrimPrefix(controllers, "name="))}
		}
		for _, dir := range dirs {
			if procs := filepath.Join(dir, path, "cgroup.procs"); fileExists(procs) && isCgroupFS(dir, id == "0") {
				return procs
			}
		}
	}
	return ""
}

// isCgroupFS reports whether dir is the mount of a cgroup hierarchy: v2's
// when v2 is set, else a v1 one.
func isCgroupFS(dir string, v2 bool) bool {
	if v2 {
		return isCgroup2(dir)
	}
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP_SUPER_MAGIC
}
