package monitor

import (
	"bytes"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// oomCounter reads how many processes the kernel's OOM killer killed in the
// container's memory cgroup, so that a death by SIGKILL can be told apart
// from an OOM kill. It finds the cgroup once, while the container lives.
//
// On cgroup v2 the count must be read while the cgroup exists: under the
// systemd driver the container's cgroup is a transient scope that systemd
// removes as soon as its last process exits, often before the monitor has
// reaped the init, and a file of a removed cgroup reads ENODEV even through
// a descriptor opened earlier (an OOM kill then read as a plain SIGKILL,
// reason Error). So the monitor holds memory.events open and in its epoll
// set: the kernel wakes a poller (EPOLLPRI) at the moment it counts a kill,
// before the victim has even exited, and the monitor reads the count then
// (refresh) and keeps the highest it saw.
type oomCounter struct {
	path  string // memory.oom_control (v1) or memory.events (v2); empty when unknown
	start int
	seen  int // the highest count read while the container lived
	fd    int // memory.events held open and watched (v2), or -1
}

const cgroupRoot = "/sys/fs/cgroup"

func newOOMCounter(pid int) oomCounter {
	b, err := readFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return oomCounter{fd: -1}
	}
	o := oomCounter{path: oomFile(string(b)), fd: -1}
	o.start = o.count()
	o.seen = o.start
	return o
}

// open holds a v2 memory.events open for refresh and the epoll set. v1's
// memory.oom_control has no such notification; its cgroup stays until the
// runtime's delete.
func (o *oomCounter) open() {
	o.fd = -1
	if !strings.HasSuffix(o.path, "/memory.events") {
		return
	}
	if fd, err := unix.Open(o.path, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		o.fd = fd
	}
}

// refresh reads the held file and keeps its count when it is the highest
// yet; the read also re-arms the file's EPOLLPRI. False when the file is
// gone (its cgroup removed) or was never held: the caller closes it.
func (o *oomCounter) refresh() bool {
	if o.fd < 0 {
		return false
	}
	var buf [512]byte
	n, err := unix.Pread(o.fd, buf[:], 0)
	if err != nil || n <= 0 {
		return false
	}
	o.seen = max(o.seen, oomKills(buf[:n]))
	return true
}

// close lets the held file go.
func (o *oomCounter) close() {
	if o.fd >= 0 {
		unix.Close(o.fd)
	}
	o.fd = -1
}

// oomFile picks the file that counts OOM kills from /proc/PID/cgroup: the
// v1 memory controller's when there is one, else the v2 group's.
func oomFile(procCgroup string) string {
	var unified string
	for _, line := range strings.Split(procCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
			continue
		}
		for _, controller := range strings.Split(parts[1], ",") {
			if controller == "memory" {
				return cgroupRoot + "/memory" + parts[2] + "/memory.oom_control"
			}
		}
	}
	if unified == "" {
		return ""
	}
	// On a hybrid host the v2 tree is mounted below the v1 ones.
	if unix.Access(cgroupRoot+"/unified", unix.F_OK) == nil {
		return cgroupRoot + "/unified" + unified + "/memory.events"
	}
	return cgroupRoot + unified + "/memory.events"
}

func (o oomCounter) count() int {
	if o.path == "" {
		return 0
	}
	b, err := readFile(o.path)
	if err != nil {
		return 0
	}
	return oomKills(b)
}

// oomKills finds the "oom_kill N" line that both file formats share.
func oomKills(b []byte) int {
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("oom_kill ")); ok {
			n, _ := strconv.Atoi(string(bytes.TrimSpace(v)))
			return n
		}
	}
	return 0
}

// killed: the count rose during the container's life, as last read
// through the held file or, where the cgroup is still there, now.
func (o *oomCounter) killed() bool {
	o.refresh()
	return max(o.seen, o.count()) > o.start
}
