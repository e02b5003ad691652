package oci

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/mountinfo"
)

// A stranded init is what a create cut short leaves when the runtime's
// create is killed (with its monitor: a deadline, a monitor killed, a daemon
// restart rolling the create back) after it started the container's init
// but before it wrote state.json. The init (`runc init`) waits on the
// container's exec fifo for a start that never comes, in the container's
// cgroup under its pod's and in the pod's namespaces; the runtime does not
// know the container, and its delete --force removes the state directory
// but not the process. Its command line names nothing; the exec fifo it
// holds open, ROOT/ID/exec.fifo (runc's and crun's), names the container
// and the runtime root, so the daemon that owns that root can find it.

// strandedInitWait bounds the wait for a killed init to be gone.
const strandedInitWait = 5 * time.Second

// execFifo is the name of the fifo a created container's init opens for
// writing, which blocks until the runtime's start opens it for reading.
const execFifo = "exec.fifo"

// WaitingInits lists, by container ID, the processes that hold the exec
// fifo of a container under the state root root open: the inits of the
// containers created and not started, stranded or not. The caller tells
// them apart by its records.
func WaitingInits(root string) map[string][]int {
	found := map[string][]int{}
	if root == "" {
		return found
	}
	prefix := filepath.Clean(root) + "/"
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if id, ok := waitingOn(pid, prefix); ok {
			found[id] = append(found[id], pid)
		}
	}
	return found
}

// waitingOn reports the container whose exec fifo under prefix (a runtime
// root and a slash) pid has open.
func waitingOn(pid int, prefix string) (string, bool) {
	fdDir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, _ := os.ReadDir(fdDir)
	for _, fd := range fds {
		target, err := os.Readlink(fdDir + "/" + fd.Name())
		if err != nil {
			continue
		}
		// The runtime's delete removed the fifo under it: the link says so.
		target = strings.TrimSuffix(target, " (deleted)")
		rest, ok := strings.CutPrefix(target, prefix)
		if !ok {
			continue
		}
		id, name, ok := strings.Cut(rest, "/")
		if ok && name == execFifo && id != "" {
			return id, true
		}
	}
	return "", false
}

// KillStrandedInits kills, for each container ID of the state root root
// for which keep is false, the inits waiting on its exec fifo, waits for
// them to be gone and removes their cgroups. It returns the IDs it
// killed inits of.
func KillStrandedInits(root string, keep func(id string) bool) ([]string, error) {
	var killed []string
	var errs []error
	for id, pids := range WaitingInits(root) {
		if keep(id) {
			continue
		}
		for _, pid := range pids {
			if err := killStrandedInit(pid, root, id); err != nil {
				errs = append(errs, fmt.Errorf("stranded init %d of %s: %w", pid, id, err))
			}
		}
		killed = append(killed, id)
	}
	return killed, errors.Join(errs...)
}

// killStrandedInits kills the stranded inits of one container: what its
// delete --force left.
func killStrandedInits(root, id string) error {
	_, err := KillStrandedInits(root, func(other string) bool { return other != id })
	return err
}

// killStrandedInit SIGKILLs pid through a pidfd, once that pidfd shows it
// still waits on id's exec fifo (not a process that reused the pid), then
// removes the cgroups it was in once it is gone.
func killStrandedInit(pid int, root, id string) error {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd: %w", err)
	}
	defer unix.Close(pidfd)
	if got, ok := waitingOn(pid, filepath.Clean(root)+"/"); !ok || got != id {
		return nil // gone, or another process now
	}
	// Only the container's own cgroups, named after it (cgroupfs: ID;
	// systemd: PREFIX-ID.scope): never a pod's or the host's a process
	// that holds such a fifo happens to be in.
	var cgroups []string
	for _, dir := range cgroupDirs(pid) {
		if strings.Contains(filepath.Base(dir), id) {
			cgroups = append(cgroups, dir)
		}
	}
	if err := unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill: %w", err)
	}
	// The pidfd turns readable when the process exits.
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, int(strandedInitWait/time.Millisecond)); err != nil || n == 0 {
		return fmt.Errorf("still there %s after SIGKILL (%v)", strandedInitWait, err)
	}
	return removeCgroups(cgroups)
}

// removeCgroups removes the given cgroup directories, retrying while the
// kernel still counts a process that just exited in them.
func removeCgroups(dirs []string) error {
	deadline := time.Now().Add(strandedInitWait)
	for _, dir := range dirs {
		for {
			err := unix.Rmdir(dir)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				return fmt.Errorf("remove cgroup %s: %w", dir, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// cgroupDirs lists the directories of pid's cgroups, in every hierarchy
// mounted in the daemon's mount namespace (one on cgroup v2; one per
// controller mount on v1, and the unified one of a hybrid host). A
// process in a hierarchy's root has nothing to remove there.
func cgroupDirs(pid int) []string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return nil
	}
	mounts := cgroupMounts()
	var dirs []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[2] == "/" || !filepath.IsAbs(parts[2]) {
			continue
		}
		for _, m := range mounts {
			if m.serves(parts[1]) {
				dirs = append(dirs, filepath.Join(m.point, filepath.Clean(parts[2])))
			}
		}
	}
	return dirs
}

// cgroupMount is a mounted cgroup hierarchy.
type cgroupMount struct {
	point   string
	v2      bool
	options map[string]bool // v1: the controllers and name= of the hierarchy
}

// serves reports whether the mount is the hierarchy that a /proc/PID/cgroup
// line with these controllers ("" for v2) is about.
func (m cgroupMount) serves(controllers string) bool {
	if controllers == "" {
		return m.v2
	}
	if m.v2 {
		return false
	}
	for _, c := range strings.Split(controllers, ",") {
		if !m.options[c] {
			return false
		}
	}
	return true
}

// cgroupMounts lists the cgroup hierarchies mounted at their roots.
func cgroupMounts() []cgroupMount {
	f, err := os.Open(mountinfo.Path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var mounts []cgroupMount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		m, ok := mountinfo.ParseLine(line)
		_, after, found := strings.Cut(line, " - ")
		fields := strings.Fields(line)
		tail := strings.Fields(after)
		if !ok || !found || len(fields) < 4 || fields[3] != "/" || len(tail) < 3 {
			continue
		}
		switch tail[0] {
		case "cgroup2":
			mounts = append(mounts, cgroupMount{point: m.Point, v2: true})
		case "cgroup":
			opts := map[string]bool{}
			for _, o := range strings.Split(tail[2], ",") {
				opts[o] = true
			}
			mounts = append(mounts, cgroupMount{point: m.Point, options: opts})
		}
	}
	return mounts
}
