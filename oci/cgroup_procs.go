package oci

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ProcessStats are a cgroup's processes and the files they hold open.
type ProcessStats struct {
	Processes       uint64 // processes in the cgroup itself (cgroup.procs)
	FileDescriptors uint64 // their open file descriptors, summed
	Sockets         uint64 // those of them that are sockets
}

// procRoot is where the kernel shows processes.
const procRoot = "/proc"

// ReadProcessStats counts the processes of the container's cgroup and their
// open files and sockets, as cAdvisor does: cgroup.procs, then each
// process's /proc/PID/fd. It costs a read of each descriptor's link, so it
// is for the metrics, not for the stats the kubelet asks for every few
// seconds. A cgroup that is gone is ErrNotFound; a process that ends
// during the count is left out.
func ReadProcessStats(cgroupsPath string, driver CgroupDriver) (ProcessStats, error) {
	rel, err := cgroupRelPath(cgroupsPath, driver)
	if err != nil {
		return ProcessStats{}, err
	}
	return readProcessStats(cgroupRoot, currentHost().cgroup2, rel)
}

func readProcessStats(root string, cgroup2 bool, rel string) (ProcessStats, error) {
	dir := filepath.Join(root, rel)
	if !cgroup2 {
		// Every container cgroup has a memory one (readRawV1).
		dir = filepath.Join(root, "memory", rel)
	}
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return ProcessStats{}, statsError(rel, err)
	}
	var st ProcessStats
	for line := range strings.Lines(string(data)) {
		pid, err := strconv.Atoi(strings.TrimSpace(line))
		if err != nil {
			continue
		}
		st.Processes++
		fds, sockets := countFDs(pid)
		st.FileDescriptors += fds
		st.Sockets += sockets
	}
	return st, nil
}

// countFDs counts a process's open descriptors and, by their links
// ("socket:[INODE]"), its sockets. A process that is gone has none.
func countFDs(pid int) (fds, sockets uint64) {
	fdDir := filepath.Join(procRoot, strconv.Itoa(pid), "fd")
	f, err := os.Open(fdDir)
	if err != nil {
		return 0, 0
	}
	names, _ := f.Readdirnames(-1)
	f.Close()
	var link [64]byte
	for _, name := range names {
		fds++
		n, err := unix.Readlink(fdDir+"/"+name, link[:])
		if err != nil {
			continue // closed since the list was read
		}
		// A longer link is cut to the buffer, enough for the prefix.
		if strings.HasPrefix(string(link[:n]), "socket:") {
			sockets++
		}
	}
	return fds, sockets
}
