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
type oomCounter struct {
	path  string // memory.oom_control (v1) or memory.events (v2); empty when unknown
	start int
}

const cgroupRoot = "/sys/fs/cgroup"

func newOOMCounter(pid int) oomCounter {
	b, err := readFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return oomCounter{}
	}
	o := oomCounter{path: oomFile(string(b))}
	o.start = o.count()
	return o
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

func (o oomCounter) killed() bool { return o.count() > o.start }
