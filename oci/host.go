package oci

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/mountinfo"
)

// hostFacts are the properties of this host and daemon that shape a spec. They
// do not change while the daemon runs, so they are read once.
type hostFacts struct {
	// oomScoreAdj is the daemon's own: without CAP_SYS_RESOURCE the runtime
	// cannot give a container less.
	oomScoreAdj int
	// nofileHard is the daemon's RLIMIT_NOFILE hard limit: without
	// CAP_SYS_RESOURCE the runtime cannot raise a container's above it.
	nofileHard uint64
	// lastCap is the kernel's highest capability number.
	lastCap int
	// boundingCaps is the daemon's capability bounding set: a container
	// cannot hold a capability outside it.
	boundingCaps capSet
	// cgroup2 is true on a unified (cgroup v2 only) host. A hybrid host, with
	// v1 controllers and an empty v2 tree beside them, is v1 for runc.
	cgroup2 bool
	// swapAccounting is true when the memory cgroup can limit swap.
	swapAccounting bool
	// hugetlb is true when the hugetlb controller is available to
	// containers: mounted in the v1 hierarchy, or enabled in the v2 root.
	hugetlb bool
	// apparmor is true when the kernel has AppArmor enabled.
	apparmor bool
	// appArmorProfiles lists the loaded AppArmor profiles, "NAME (MODE)"
	// a line.
	appArmorProfiles string
	// mountInfo is the daemon's mount table, read to check a bind
	// source's propagation.
	mountInfo string
}

const cgroupRoot = "/sys/fs/cgroup"

var currentHost = sync.OnceValue(readHostFacts)

func readHostFacts() hostFacts {
	h := hostFacts{
		oomScoreAdj:  readOOMScoreAdj("/proc/self/oom_score_adj"),
		nofileHard:   readNofileHard(),
		lastCap:      readLastCap("/proc/sys/kernel/cap_last_cap"),
		boundingCaps: readBoundingCaps("/proc/self/status"),
		cgroup2:      isCgroup2(cgroupRoot),
		apparmor:     readAppArmorEnabled("/sys/module/apparmor/parameters/enabled"),
		// Paths, not contents: both change while the daemon runs.
		appArmorProfiles: appArmorProfilesPath,
		mountInfo:        mountinfo.Path,
	}
	h.swapAccounting = detectSwapAccounting(h.cgroup2)
	h.hugetlb = hasController(h.cgroup2, "hugetlb")
	return h
}

func readOOMScoreAdj(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0
	}
	return v
}

func readNofileHard() uint64 {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return defaultNofile
	}
	return lim.Max
}

func readLastCap(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return len(capabilityNames) - 1
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || v < 0 {
		return len(capabilityNames) - 1
	}
	return v
}

// readBoundingCaps reads CapBnd of a /proc/PID/status file; when it cannot,
// it assumes every capability and lets the runtime report a missing one.
func readBoundingCaps(path string) capSet {
	data, err := os.ReadFile(path)
	if err != nil {
		return ^capSet(0)
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			v, err := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
			if err != nil {
				return ^capSet(0)
			}
			return capSet(v)
		}
	}
	return ^capSet(0)
}

func isCgroup2(root string) bool {
	var st unix.Statfs_t
	return unix.Statfs(root, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

func readAppArmorEnabled(path string) bool {
	data, err := os.ReadFile(path)
	return err == nil && bytes.HasPrefix(data, []byte("Y"))
}

// detectSwapAccounting looks for the memory cgroup's swap file: memsw on v1,
// memory.swap.max in the daemon's own cgroup on v2 (the root cgroup has none).
func detectSwapAccounting(cgroup2 bool) bool {
	if !cgroup2 {
		return fileExists(filepath.Join(cgroupRoot, "memory", "memory.memsw.limit_in_bytes"))
	}
	own := ownCgroup2Path("/proc/self/cgroup")
	if own == "/" || own == "" {
		return true // cannot tell from the root; runc reports it if not
	}
	return fileExists(filepath.Join(cgroupRoot, own, "memory.swap.max"))
}

// ownCgroup2Path returns the "0::" line's path of a /proc/PID/cgroup file.
func ownCgroup2Path(procFile string) string {
	f, err := os.Open(procFile)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return rest
		}
	}
	return ""
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// hasController tells whether a container's cgroup can use the named
// controller. On v1 (and hybrid) hosts that is a controller mounted in a
// hierarchy of its own, which /proc/self/cgroup lists with a non-zero
// hierarchy ID; a hybrid host's v2 tree beside it does not count, since runc
// uses v1 there. On v2 it is a controller the root offers.
func hasController(cgroup2 bool, name string) bool {
	if cgroup2 {
		data, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers"))
		return err == nil && slices.Contains(strings.Fields(string(data)), name)
	}
	return slices.Contains(v1Controllers("/proc/self/cgroup"), name)
}

// v1Controllers lists the controllers of the v1 hierarchies in a
// /proc/PID/cgroup file ("4:memory:/path", "1:cpu,cpuacct:/").
func v1Controllers(procFile string) []string {
	data, err := os.ReadFile(procFile)
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.Lines(string(data)) {
		id, rest, ok := strings.Cut(line, ":")
		if !ok || id == "0" {
			continue
		}
		list, _, _ := strings.Cut(rest, ":")
		out = append(out, strings.Split(list, ",")...)
	}
	return out
}
