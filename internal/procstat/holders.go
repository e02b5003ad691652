package procstat

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// holderSearchBudget bounds what one search for holders reads: the
// descriptors of the node's processes, pods' included, and a pod may hold
// millions. Past it the search stops and says so (Holders.Cut): a holder
// only ever serves a message or a wait, never a kill.
const holderSearchBudget = 1 << 16

// holderReadBatch is how many names of a descriptor dir are read at a time,
// so that a process's million descriptors are never in memory at once.
const holderReadBatch = 1024

// Holders are the processes a search found with a file open.
type Holders struct {
	PIDs []int
	// Cut: the search stopped at its budget; others may hold it too.
	Cut bool
	// budget is what the search could read, for String.
	budget int
}

// FileHolders lists the other processes that have f's file open (by device
// and inode, never by a name): whichever of them holds a flock on it holds
// the lock.
func FileHolders(f *os.File) Holders {
	match, ok := sameFile(f)
	if !ok {
		return Holders{}
	}
	return holders(match, holderSearchBudget)
}

// HoldsFile tells whether process pid has f's file open, from its own
// descriptors alone (within the search budget).
func HoldsFile(pid int, f *os.File) bool {
	return holdsFile(pid, f, holderSearchBudget)
}

// holdsFile is HoldsFile reading at most budget descriptors.
func holdsFile(pid int, f *os.File, budget int) bool {
	match, ok := sameFile(f)
	if !ok {
		return false
	}
	return holdsAny(strconv.Itoa(pid), match, &budget)
}

func sameFile(f *os.File) (func(fdPath string) bool, bool) {
	var want unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &want); err != nil {
		return nil, false
	}
	return func(fd string) bool {
		var st unix.Stat_t
		return unix.Stat(fd, &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino
	}, true
}

// SocketHolders lists the other processes that hold a unix socket bound at
// path, found by the socket's inode (/proc/net/unix), never by a name.
func SocketHolders(path string) Holders {
	data, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return Holders{}
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
		return Holders{}
	}
	return holders(func(fd string) bool {
		target, err := os.Readlink(fd)
		return err == nil && inodes[target]
	}, holderSearchBudget)
}

// holders lists the processes but this one with a descriptor match takes,
// reading at most budget processes and descriptors.
func holders(match func(fdPath string) bool, budget int) Holders {
	h := Holders{budget: budget}
	self := strconv.Itoa(os.Getpid())
	eachName("/proc", &budget, func(name string) bool {
		if pid, err := strconv.Atoi(name); err == nil && name != self && holdsAny(name, match, &budget) {
			h.PIDs = append(h.PIDs, pid)
		}
		return false
	})
	h.Cut = budget <= 0
	return h
}

// holdsAny tells whether a descriptor of process pid matches, spending the
// budget on each one read.
func holdsAny(pid string, match func(fdPath string) bool, budget *int) bool {
	found := false
	dir := "/proc/" + pid + "/fd/"
	eachName(dir, budget, func(fd string) bool {
		found = match(dir + fd)
		return found
	})
	return found
}

// eachName calls fn with the names in dir, a batch at a time, one unit of
// budget each, until fn says stop or the names or the budget run out.
func eachName(dir string, budget *int, fn func(name string) (stop bool)) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	defer d.Close()
	for *budget > 0 {
		names, err := d.Readdirnames(holderReadBatch)
		for _, n := range names {
			if *budget <= 0 {
				return
			}
			*budget--
			if fn(n) {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// String names the holders for an operator: pid, state and command line
// (which only informs; nothing is decided by it).
func (h Holders) String() string {
	pids := h.PIDs
	if len(pids) == 0 && h.Cut {
		return "no process found (the search stopped at its budget of " + strconv.Itoa(h.budget) + " descriptors)"
	}
	if len(pids) == 0 {
		return "no process with the file open (a descriptor in flight, or one that just closed)"
	}
	var names []string
	for i, pid := range pids {
		if i == maxNamed {
			names = append(names, fmt.Sprintf("and %d more", len(pids)-maxNamed))
			break
		}
		cmdline := readHead("/proc/"+strconv.Itoa(pid)+"/cmdline", 64)
		state := "gone"
		if st, err := Read(pid); err == nil {
			state = string(st.State)
		}
		names = append(names, fmt.Sprintf("pid %d (%s) in state %s", pid,
			strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")), state))
	}
	if h.Cut {
		names = append(names, "maybe others (the search stopped at its budget)")
	}
	return strings.Join(names, ", ")
}

// readHead reads at most n bytes of the file at path: a command line can
// be megabytes long.
func readHead(path string, n int) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	buf := make([]byte, n)
	m, _ := io.ReadFull(f, buf)
	return buf[:m]
}

// maxNamed is how many holders a message names.
const maxNamed = 8
