package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"
)

// CgroupStats are the usage figures of one cgroup: a container's, or a
// pod's (its cgroup parent, which holds its containers' cgroups).
type CgroupStats struct {
	CPU    CPUStats
	Memory MemoryStats
	// Swap is nil when the host does not account swap per cgroup.
	Swap *SwapStats
	// Processes counts the tasks in the cgroup and below it (pids.current):
	// the kernel counts threads, each a task.
	Processes uint64
	// ProcessesLimit is pids.max; 0: none.
	ProcessesLimit uint64
	// IO lists the bytes and operations per block device.
	IO []DeviceIO
	// CPUPressure, MemoryPressure and IOPressure are the kernel's pressure
	// stall information; nil where the kernel keeps none (cgroup v1).
	CPUPressure, MemoryPressure, IOPressure *Pressure
}

// CPUStats are cumulative CPU times, in nanoseconds, and CFS throttling.
type CPUStats struct {
	UsageNanos, UserNanos, SystemNanos uint64
	Periods, ThrottledPeriods          uint64
	ThrottledNanos                     uint64
}

// MemoryStats are the memory cgroup's figures, in bytes and counts.
type MemoryStats struct {
	Usage                       uint64 // all memory charged, page cache included
	WorkingSet                  uint64 // usage less inactive file pages: what eviction looks at
	RSS                         uint64 // anonymous memory
	Cache                       uint64 // page cache
	Limit                       uint64 // 0: no limit
	PageFaults, MajorPageFaults uint64
	MaxUsage                    uint64 // the highest usage seen (v1 max_usage_in_bytes, v2 memory.peak)
	Failcnt                     uint64 // times usage hit the limit (v1 failcnt, v2 memory.events max)
	Kernel                      uint64 // kernel memory (v1 kmem usage, v2 memory.stat kernel)
	MappedFile                  uint64 // page cache mapped into processes
	OOMKills                    uint64 // processes the OOM killer ended in the cgroup
	// MemSwapLimit limits memory and swap together (v1 memsw; v2
	// memory.max plus memory.swap.max); 0: none, or swap not accounted.
	MemSwapLimit uint64
}

// SwapStats are the cgroup's swap usage and limit, in bytes (limit 0: none).
type SwapStats struct {
	Usage, Limit uint64
}

// DeviceIO are the bytes and operations a cgroup read from and wrote to one
// block device.
type DeviceIO struct {
	Device                string // /dev/NAME, or MAJOR:MINOR when unknown
	Major, Minor          uint64
	ReadBytes, WriteBytes uint64
	Reads, Writes         uint64
}

// Pressure is a cgroup's pressure stall information for one resource.
type Pressure struct {
	Some, Full PressureData
}

// PressureData is one line of a pressure file: the total stall time in
// microseconds and the running averages, in percent.
type PressureData struct {
	Total                uint64
	Avg10, Avg60, Avg300 float64
}

// unlimited is the threshold above which a limit read from the kernel means
// none: cgroup v1 writes PAGE_COUNTER_MAX pages, v2 "max" (read as MaxUint64).
const unlimited = uint64(1) << 62

// statsControllers are the controllers whose files stats read: nothing else
// (cpuset, hugetlb, rdma, misc) is asked for, so a call costs a few reads.
const statsControllers = cgroups.CPU | cgroups.Memory | cgroups.Pids | cgroups.IO

// v1StatsHierarchies are the cgroup v1 hierarchies whose files stats read.
var v1StatsHierarchies = []string{"cpu", "cpuacct", "memory", "pids", "blkio"}

// ReadCgroupStats reads the container's cgroup (spec cgroupsPath, driver)
// from the cgroup filesystem: the kubelet asks every few seconds for every
// container, so this must cost a few file reads, not a runtime process. A
// cgroup that is gone is ErrNotFound.
func ReadCgroupStats(cgroupsPath string, driver CgroupDriver) (CgroupStats, error) {
	rel, err := cgroupRelPath(cgroupsPath, driver)
	if err != nil {
		return CgroupStats{}, err
	}
	return readStats(cgroupRoot, currentHost().cgroup2, rel, hostBlockDevices)
}

// ReadPodCgroupStats reads a pod's cgroup: its cgroup parent, which holds
// the cgroups of all its containers and keeps the CPU time of those that
// exited. A pod with no cgroup parent has no cgroup of its own, and one whose
// cgroup is not made yet (no container created): both are ErrNotFound.
func ReadPodCgroupStats(cgroupParent string, driver CgroupDriver) (CgroupStats, error) {
	rel, err := podCgroupRelPath(cgroupParent, driver)
	if err != nil {
		return CgroupStats{}, err
	}
	return readStats(cgroupRoot, currentHost().cgroup2, rel, hostBlockDevices)
}

// podCgroupRelPath turns a pod's cgroup parent into its path under a
// hierarchy's root: as is for cgroupfs, a slice expanded for systemd.
func podCgroupRelPath(parent string, driver CgroupDriver) (string, error) {
	if parent == "" {
		return "", fmt.Errorf("pod has no cgroup parent: %w", ErrNotFound)
	}
	switch driver {
	case "", CgroupfsDriver:
		return filepath.Join("/", parent), nil
	case SystemdDriver:
		slice, err := SystemdSlice(parent)
		if err != nil {
			return "", err
		}
		return expandSlice(slice)
	default:
		return "", fmt.Errorf("%w: unknown cgroup driver %q", ErrInvalid, driver)
	}
}

// readStats reads the cgroup at rel under root with the readers runc and
// cAdvisor use (opencontainers/cgroups), so that the figures match what the
// kubelet's cAdvisor would show. A hybrid host (v1 controllers, an empty v2
// tree beside them) is read as v1, as runc places containers there. devs
// names the block devices of the IO figures.
func readStats(root string, cgroup2 bool, rel string, devs *blockDevices) (CgroupStats, error) {
	var raw *cgroups.Stats
	var err error
	if cgroup2 {
		raw, err = readRawV2(filepath.Join(root, rel))
	} else {
		raw, err = readRawV1(root, rel)
	}
	if err != nil {
		return CgroupStats{}, err
	}
	out := convertStats(raw, cgroup2, devs)
	memDir := filepath.Join(root, rel)
	if !cgroup2 {
		memDir = filepath.Join(root, "memory", rel)
	}
	oomKills, maxHits := memoryEvents(memDir, cgroup2)
	out.Memory.OOMKills = oomKills
	if cgroup2 {
		out.Memory.Failcnt = maxHits
	}
	return out, nil
}

// memoryEvents reads what opencontainers/cgroups leaves out: the OOM kills
// (v1 memory.oom_control, v2 memory.events) and, on v2, how many times
// usage hit memory.max, v1's failcnt. A kernel without the counters (v1
// before 4.13) gives 0.
func memoryEvents(dir string, cgroup2 bool) (oomKills, maxHits uint64) {
	file := "memory.oom_control"
	if cgroup2 {
		file = "memory.events"
	}
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0, 0
	}
	for line := range strings.Lines(string(data)) {
		key, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			continue
		}
		switch key {
		case "oom_kill":
			oomKills = n
		case "max":
			maxHits = n
		}
	}
	return oomKills, maxHits
}

func readRawV2(dir string) (*cgroups.Stats, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, statsError(dir, err)
	}
	m, err := fs2.NewManager(&cgroups.Cgroup{Resources: &cgroups.Resources{}}, dir)
	if err != nil {
		return nil, statsError(dir, err)
	}
	st, err := m.Stats(&cgroups.StatsOptions{Controllers: statsControllers})
	if err != nil {
		// Removed between the check and the reads.
		if _, serr := os.Stat(dir); serr != nil {
			return nil, statsError(dir, serr)
		}
		return nil, statsError(dir, err)
	}
	return st, nil
}

// v1Mounted keeps, per cgroup root, which of v1StatsHierarchies it has:
// the host's mounts do not change under the daemon, and looking them up is
// five stat calls for every cgroup the kubelet asks about.
var v1Mounted sync.Map // root → []string

func mountedV1Hierarchies(root string) []string {
	if hs, ok := v1Mounted.Load(root); ok {
		return hs.([]string)
	}
	var hs []string
	for _, h := range v1StatsHierarchies {
		if _, err := os.Stat(filepath.Join(root, h)); err == nil {
			hs = append(hs, h)
		}
	}
	v1Mounted.Store(root, hs)
	return hs
}

func readRawV1(root, rel string) (*cgroups.Stats, error) {
	// The memory hierarchy tells whether the cgroup is there: every
	// container and pod cgroup has one.
	memDir := filepath.Join(root, "memory", rel)
	if _, err := os.Stat(memDir); err != nil {
		return nil, statsError(rel, err)
	}
	paths := map[string]string{}
	for _, h := range mountedV1Hierarchies(root) {
		paths[h] = filepath.Join(root, h, rel)
	}
	m, err := fs.NewManager(&cgroups.Cgroup{Resources: &cgroups.Resources{}}, paths)
	if err != nil {
		return nil, statsError(rel, err)
	}
	st, err := m.Stats(&cgroups.StatsOptions{Controllers: statsControllers})
	if err == nil {
		_, err = os.Stat(memDir) // v1 readers skip a directory that vanished
	}
	if err != nil {
		return nil, statsError(rel, err)
	}
	return st, nil
}

// convertStats keeps what the CRI and the cAdvisor metrics ask for, with
// cAdvisor's definitions: working set is usage less inactive file pages.
func convertStats(st *cgroups.Stats, cgroup2 bool, devs *blockDevices) CgroupStats {
	ms := st.MemoryStats.Stats
	// v1 keeps hierarchical totals under total_*; v2 is always hierarchical.
	key := func(k string) string {
		if cgroup2 {
			return k
		}
		return "total_" + k
	}
	rssKey := key("rss")
	if cgroup2 {
		rssKey = "anon"
	}
	out := CgroupStats{
		CPU: CPUStats{
			UsageNanos:       st.CpuStats.CpuUsage.TotalUsage,
			UserNanos:        st.CpuStats.CpuUsage.UsageInUsermode,
			SystemNanos:      st.CpuStats.CpuUsage.UsageInKernelmode,
			Periods:          st.CpuStats.ThrottlingData.Periods,
			ThrottledPeriods: st.CpuStats.ThrottlingData.ThrottledPeriods,
			ThrottledNanos:   st.CpuStats.ThrottlingData.ThrottledTime,
		},
		Memory: MemoryStats{
			Usage:           st.MemoryStats.Usage.Usage,
			WorkingSet:      saturatingSub(st.MemoryStats.Usage.Usage, ms[key("inactive_file")]),
			RSS:             ms[rssKey],
			Cache:           ms[key("cache")],
			Limit:           limitOrZero(st.MemoryStats.Usage.Limit),
			PageFaults:      ms[key("pgfault")],
			MajorPageFaults: ms[key("pgmajfault")],
			MaxUsage:        st.MemoryStats.Usage.MaxUsage,
			Failcnt:         st.MemoryStats.Usage.Failcnt,
			Kernel:          st.MemoryStats.KernelUsage.Usage,
			MappedFile:      ms[key("mapped_file")],
			MemSwapLimit:    limitOrZero(st.MemoryStats.SwapUsage.Limit),
		},
		Processes:      st.PidsStats.Current,
		ProcessesLimit: limitOrZero(st.PidsStats.Limit),
		CPUPressure:    pressure(st.CpuStats.PSI),
		MemoryPressure: pressure(st.MemoryStats.PSI),
		IOPressure:     pressure(st.BlkioStats.PSI),
	}
	if cgroup2 {
		out.Memory.Cache = ms["file"]
		out.Memory.MappedFile = ms["file_mapped"]
		// "kernel" since 5.18; before, its main parts.
		out.Memory.Kernel = ms["kernel"]
		if _, ok := ms["kernel"]; !ok {
			out.Memory.Kernel = ms["kernel_stack"] + ms["pagetables"] + ms["slab"]
		}
		// The library adds memory.max to a limited memory.swap.max;
		// with no memory.max the sum means none.
		if limitOrZero(st.MemoryStats.Usage.Limit) == 0 {
			out.Memory.MemSwapLimit = 0
		}
	}
	out.Swap = swapStats(st.MemoryStats, cgroup2)
	if out.Swap == nil {
		out.Memory.MemSwapLimit = 0 // swap is not accounted: no such limit
	}
	out.IO = deviceIO(st.BlkioStats, devs)
	return out
}

// swapStats reads swap where the kernel accounts it: v1 charges memory and
// swap together in memsw (absent without swap accounting), v2 has
// memory.swap.current and memory.swap.max (absent likewise). The limit read
// of a present file is never 0: "max" or a v1 huge number stand for none.
func swapStats(m cgroups.MemoryStats, cgroup2 bool) *SwapStats {
	if cgroup2 {
		if m.SwapOnlyUsage.Limit == 0 {
			return nil
		}
		return &SwapStats{Usage: m.SwapOnlyUsage.Usage, Limit: limitOrZero(m.SwapOnlyUsage.Limit)}
	}
	if m.SwapUsage.Limit == 0 {
		return nil
	}
	s := &SwapStats{Usage: saturatingSub(m.SwapUsage.Usage, m.Usage.Usage)}
	// memsw limits memory plus swap: what swap may take is the difference.
	if memsw, mem := limitOrZero(m.SwapUsage.Limit), limitOrZero(m.Usage.Limit); memsw != 0 && mem != 0 {
		s.Limit = saturatingSub(memsw, mem)
	}
	return s
}

// deviceIO sums the read and write entries per device; v1 also lists
// "Sync", "Async", "Total"... per device, which are left out.
func deviceIO(b cgroups.BlkioStats, devs *blockDevices) []DeviceIO {
	var out []DeviceIO
	at := func(major, minor uint64) *DeviceIO {
		for i := range out {
			if out[i].Major == major && out[i].Minor == minor {
				return &out[i]
			}
		}
		out = append(out, DeviceIO{Major: major, Minor: minor, Device: devs.name(major, minor)})
		return &out[len(out)-1]
	}
	// Each list counts one unit (bytes, operations); fields picks a
	// device's read and write counters for it.
	sum := func(entries []cgroups.BlkioStatEntry, fields func(*DeviceIO) (read, write *uint64)) {
		for _, e := range entries {
			var field *uint64
			switch e.Op {
			case "Read", "read":
				field, _ = fields(at(e.Major, e.Minor))
			case "Write", "write":
				_, field = fields(at(e.Major, e.Minor))
			default:
				continue
			}
			*field += e.Value
		}
	}
	sum(b.IoServiceBytesRecursive, func(d *DeviceIO) (*uint64, *uint64) { return &d.ReadBytes, &d.WriteBytes })
	sum(b.IoServicedRecursive, func(d *DeviceIO) (*uint64, *uint64) { return &d.Reads, &d.Writes })
	return out
}

// blockDevices names block devices by their numbers as the kernel does in
// dir, each read once: a name does not change while the device is there.
type blockDevices struct {
	dir   string
	names sync.Map // "MAJOR:MINOR" → name
}

// hostBlockDevices are this host's, named in sysfs.
var hostBlockDevices = &blockDevices{dir: "/sys/dev/block"}

// BlockDeviceName is the /dev path of a block device by its numbers, as
// sysfs names it; MAJOR:MINOR for one it does not (an overlay, a tmpfs).
func BlockDeviceName(major, minor uint64) string {
	return hostBlockDevices.name(major, minor)
}

func (b *blockDevices) name(major, minor uint64) string {
	num := fmt.Sprintf("%d:%d", major, minor)
	if v, ok := b.names.Load(num); ok {
		return v.(string)
	}
	name := num
	if data, err := os.ReadFile(filepath.Join(b.dir, num, "uevent")); err == nil {
		for line := range strings.Lines(string(data)) {
			if dev, ok := strings.CutPrefix(strings.TrimSpace(line), "DEVNAME="); ok && dev != "" {
				name = "/dev/" + dev
			}
		}
	}
	b.names.Store(num, name)
	return name
}

func pressure(p *cgroups.PSIStats) *Pressure {
	if p == nil {
		return nil
	}
	conv := func(d cgroups.PSIData) PressureData {
		return PressureData{Total: d.Total, Avg10: d.Avg10, Avg60: d.Avg60, Avg300: d.Avg300}
	}
	return &Pressure{Some: conv(p.Some), Full: conv(p.Full)}
}

func limitOrZero(v uint64) uint64 {
	if v >= unlimited {
		return 0
	}
	return v
}

func statsError(cgroup string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cgroup %s: %w", cgroup, ErrNotFound)
	}
	return fmt.Errorf("read stats of cgroup %s: %w", cgroup, err)
}

func saturatingSub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
