package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// FileHolders lists the other processes that have f's file open (by device
// and inode, never by a name): whichever of them holds a flock on it holds
// the lock.
func FileHolders(f *os.File) []int {
	var want unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &want); err != nil {
		return nil
	}
	return holders(func(fd string) bool {
		var st unix.Stat_t
		return unix.Stat(fd, &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino
	})
}

// SocketHolders lists the other processes that hold a unix socket bound at
// path, found by the socket's inode (/proc/net/unix), never by a name.
func SocketHolders(path string) []int {
	data, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return nil
	}
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		// Num RefCount Protocol Flags Type St Inode Path
		fields := strings.Fields(line)
		if len(fields) == 8 && fields[7] == path {
			inodes["socket:["+fields[6]+"]"] = true
		}
	}
	if len(inodes) == 0 {
		return nil
	}
	return holders(func(fd string) bool {
		target, err := os.Readlink(fd)
		return err == nil && inodes[target]
	})
}

// holders lists the processes but this one with a descriptor match takes.
func holders(match func(fdPath string) bool) []int {
	var pids []int
	self := os.Getpid()
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == self {
			continue
		}
		fds, _ := os.ReadDir("/proc/" + d.Name() + "/fd")
		for _, fd := range fds {
			if match("/proc/" + d.Name() + "/fd/" + fd.Name()) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// Describe names processes for an operator: pid, state and
// command line (which only informs; nothing is decided by it).
func Describe(pids []int) string {
	if len(pids) == 0 {
		return "no process with the file open (a descriptor in flight, or one that just closed)"
	}
	var names []string
	for _, pid := range pids {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		state := "gone"
		if st, err := Read(pid); err == nil {
			state = string(st.State)
		}
		names = append(names, fmt.Sprintf("pid %d (%s) in state %s", pid,
			strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")), state))
	}
	return strings.Join(names, ", ")
}
