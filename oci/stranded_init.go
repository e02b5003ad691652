package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// A stranded init is what a create cut short leaves when the runtime's
// create is killed (with its monitor: a deadline, a monitor killed, a daemon
// restart rolling the create back) after it started the container's init
// but before it wrote state.json. The init (`runc init`) waits on the
// container's exec fifo for a start that never comes, in the container's
// cgroup under its pod's and in the pod's namespaces; the runtime does not
// know the container, and its delete --force removes the state directory
// but not the process.
//
// It is found where the runtime put it: the cgroup that minicri wrote into
// the container's spec. That cgroup's cgroup.procs lists the container's
// own processes and nothing else, so finding the init costs what the
// container is, never what the node's other processes hold (their fds, a
// fifo named like the runtime's, a cgroup named like the container): none
// of that is read, and nothing is killed or removed by a name.

// strandedInitWait bounds the wait for killed processes to be gone and
// their cgroup to be removable.
const strandedInitWait = 5 * time.Second

// removeStranded kills what is left in container id's cgroup (the spec's
// cgroupsPath under driver) once the runtime's delete is done with a
// container it did not know, and removes that cgroup in every hierarchy.
// A cgroup that is not there (the runtime removed it, or never made it)
// costs a failed open per hierarchy. A cgroup that is not the container's
// own, as CgroupsPath names it (an NRI plugin may have moved the container
// into a shared one), is not emptied: its other processes are not the
// container's.
func removeStranded(ctx context.Context, id, cgroupsPath string, driver CgroupDriver) error {
	if cgroupsPath == "" {
		return nil
	}
	rel, err := containerCgroup(id, cgroupsPath, driver)
	if err != nil || rel == "" {
		return err
	}
	return killCgroup(cgroupHierarchies(), rel, strandedWait(ctx))
}

// strandedWait is how long killed processes may take to be gone: at most
// strandedInitWait, and never past ctx's deadline (a restart's recovery
// has one for all its work).
func strandedWait(ctx context.Context) time.Duration {
	if deadline, ok := ctx.Deadline(); ok {
		return max(min(strandedInitWait, time.Until(deadline)), 0)
	}
	return strandedInitWait
}

// containerCgroup is the path under each hierarchy's root of container
// id's cgroup (cgroupsPath under driver); "" when that cgroup is not named
// after the container, as CgroupsPath names it.
func containerCgroup(id, cgroupsPath string, driver CgroupDriver) (string, error) {
	rel, err := cgroupRelPath(cgroupsPath, driver)
	if err != nil {
		return "", err
	}
	if rel == "/" || rel == "." {
		return "", fmt.Errorf("%w: cgroups path %q is a hierarchy's root", ErrInvalid, cgroupsPath)
	}
	own := id
	if driver == SystemdDriver {
		own = systemdScopePrefix + "-" + id + ".scope"
	}
	if id == "" || filepath.Base(rel) != own {
		return "", nil
	}
	return rel, nil
}

// killCgroup SIGKILLs every process of the cgroup at rel in the given
// hierarchies, waits for them to exit, and removes the cgroup's
// directories. Each process is signalled through a pidfd opened before its
// /proc/PID/cgroup is checked to be that cgroup, so that a process that
// reused the pid of one that just exited is never signalled. A fork
// between the read of cgroup.procs and the kill is found by the next read.
func killCgroup(hierarchies []cgroupMount, rel string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	var pidfds []int
	defer func() {
		for _, fd := range pidfds {
			unix.Close(fd)
		}
	}()
	killed := map[int]bool{}
	for {
		var pids []int
		for _, h := range hierarchies {
			pids = append(pids, cgroupProcs(filepath.Join(h.point, rel))...)
		}
		fresh := 0
		for _, pid := range pids {
			if killed[pid] {
				continue
			}
			killed[pid] = true
			fd, err := killInCgroup(pid, hierarchies, rel)
			if err != nil {
				return err
			}
			if fd >= 0 {
				pidfds = append(pidfds, fd)
				fresh++
			}
		}
		if fresh == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: processes still forking after %s", rel, wait)
		}
	}
	if err := waitExited(pidfds, deadline); err != nil {
		return fmt.Errorf("cgroup %s: %w", rel, err)
	}
	for _, h := range hierarchies {
		if err := removeCgroupDir(filepath.Join(h.point, rel), deadline); err != nil {
			return err
		}
	}
	return nil
}

// killInCgroup SIGKILLs pid if it is in the cgroup at rel, and returns its
// pidfd to wait on; -1 when it is gone or is not in that cgroup.
func killInCgroup(pid int, hierarchies []cgroupMount, rel string) (int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("pidfd of %d: %w", pid, err)
	}
	// Read after the pidfd is open: if pid now names a later process,
	// the pidfd's own is gone and the signal below reaches nobody.
	if !inCgroup(pid, hierarchies, rel) {
		unix.Close(fd)
		return -1, nil
	}
	err = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		unix.Close(fd)
		return -1, nil
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("kill %d: %w", pid, err)
	}
	return fd, nil
}

// inCgroup reports whether /proc/PID/cgroup puts pid in the cgroup at rel
// in one of the hierarchies.
func inCgroup(pid int, hierarchies []cgroupMount, rel string) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(data)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 || parts[2] != rel {
			continue
		}
		for _, h := range hierarchies {
			if h.serves(parts[1]) {
				return true
			}
		}
	}
	return false
}

// CgroupEmptied reports whether container id's own cgroup (cgroupsPath as
// its spec names it) holds no process in any hierarchy, or is gone: a kill
// of all its processes then has nothing left to signal. The runtime's kill
// fails on a cgroup that is gone, which systemd removes as soon as a scope
// runs empty. False when the cgroup is not the container's own (an NRI
// plugin may have moved it into a shared one): its processes cannot be
// told from others there.
func (r *Runtime) CgroupEmptied(id, cgroupsPath string) bool {
	if cgroupsPath == "" {
		return false
	}
	rel, err := containerCgroup(id, cgroupsPath, r.cgroupDriver())
	if err != nil || rel == "" {
		return false
	}
	for _, h := range cgroupHierarchies() {
		if len(cgroupProcs(filepath.Join(h.point, rel))) > 0 {
			return false
		}
	}
	return true
}

// cgroupProcs lists the processes of the cgroup directory dir; none when
// it is not there.
func cgroupProcs(dir string) []int {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for line := range strings.Lines(string(data)) {
		if pid, err := strconv.Atoi(strings.TrimSpace(line)); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitExited waits until every pidfd is readable: its process exited.
func waitExited(pidfds []int, deadline time.Time) error {
	for _, fd := range pidfds {
		for {
			left := time.Until(deadline)
			if left <= 0 {
				return errors.New("a process is still there after SIGKILL")
			}
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, int(left/time.Millisecond)+1)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return fmt.Errorf("wait for a killed process: %w", err)
			}
			if n > 0 {
				break
			}
		}
	}
	return nil
}

// removeCgroupDir removes a cgroup directory, retrying while the kernel
// still counts a process that just exited in it.
func removeCgroupDir(dir string, deadline time.Time) error {
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
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

// cgroupHierarchies are the cgroup hierarchies mounted at their roots under
// the cgroup root, where the runtime makes a container's cgroups (one on
// cgroup v2; one per controller mount on v1, and the unified one of a
// hybrid host). Read once: the host's cgroup mounts do not change under a
// running daemon.
var cgroupHierarchies = sync.OnceValue(func() []cgroupMount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	return parseCgroupMounts(f, cgroupRoot)
})

// parseCgroupMounts reads a mountinfo file for the cgroup hierarchies
// mounted at their roots at or under root.
func parseCgroupMounts(r io.Reader, root string) []cgroupMount {
	infos, err := mountinfo.GetMountsFromReader(r, mountinfo.PrefixFilter(root))
	if err != nil {
		return nil
	}
	var mounts []cgroupMount
	for _, m := range infos {
		if m.Root != "/" {
			continue
		}
		switch m.FSType {
		case "cgroup2":
			mounts = append(mounts, cgroupMount{point: m.Mountpoint, v2: true})
		case "cgroup":
			opts := map[string]bool{}
			for _, o := range strings.Split(m.VFSOptions, ",") {
				opts[o] = true
			}
			mounts = append(mounts, cgroupMount{point: m.Mountpoint, options: opts})
		}
	}
	return mounts
}
