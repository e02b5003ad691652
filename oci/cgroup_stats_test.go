package oci

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/opencontainers/cgroups"
)

// The readers refuse files that are not on a cgroup filesystem, unless told
// they run against a fake tree.
func init() { cgroups.TestMode = true }

// fakeBlockDevices names block devices from a fake /sys/dev/block: 8:0 is
// sda, 8:16 unknown.
func fakeBlockDevices(t *testing.T) *blockDevices {
	dir := t.TempDir()
	writeCgroupFiles(t, dir, map[string]string{"8:0/uevent": "MAJOR=8\nMINOR=0\nDEVNAME=sda\nDEVTYPE=disk\n"})
	return &blockDevices{dir: dir}
}

func writeCgroupFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// v1Tree is a container cgroup "/pod/c" in fake v1 hierarchies, as the
// kernel lays them out (cpu and cpuacct apart, as on this kind of host).
func v1Tree(memsw bool, limit string) map[string]string {
	files := map[string]string{
		"cpuacct/pod/c/cpuacct.usage":                 "123456789\n",
		"cpuacct/pod/c/cpuacct.usage_percpu":          "100000000 23456789 \n",
		"cpuacct/pod/c/cpuacct.stat":                  "user 5\nsystem 2\n",
		"cpu/pod/c/cpu.stat":                          "nr_periods 10\nnr_throttled 3\nthrottled_time 4000\n",
		"memory/pod/c/memory.usage_in_bytes":          "10000\n",
		"memory/pod/c/memory.max_usage_in_bytes":      "20000\n",
		"memory/pod/c/memory.failcnt":                 "3\n",
		"memory/pod/c/memory.oom_control":             "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
		"memory/pod/c/memory.kmem.usage_in_bytes":     "700\n",
		"memory/pod/c/memory.kmem.max_usage_in_bytes": "800\n",
		"memory/pod/c/memory.kmem.failcnt":            "0\n",
		"memory/pod/c/memory.limit_in_bytes":          limit,
		"memory/pod/c/memory.use_hierarchy":           "1\n",
		"memory/pod/c/memory.stat": "cache 5\nrss 6\ntotal_cache 3500\ntotal_rss 4000\ntotal_inactive_file 3000\n" +
			"total_pgfault 7\ntotal_pgmajfault 1\ntotal_mapped_file 300\n",
		"pids/pod/c/pids.current":                          "4\n",
		"pids/pod/c/pids.max":                              "max\n",
		"blkio/pod/c/blkio.throttle.io_serviced_recursive": "8:0 Read 3\n8:0 Write 4\n8:0 Total 7\nTotal 7\n",
		"blkio/pod/c/blkio.throttle.io_service_bytes_recursive": "8:0 Read 4096\n8:0 Write 8192\n8:0 Sync 0\n8:0 Total 12288\n" +
			"8:16 Write 512\nTotal 12800\n",
	}
	if memsw {
		files["memory/pod/c/memory.memsw.usage_in_bytes"] = "12000\n"
		files["memory/pod/c/memory.memsw.max_usage_in_bytes"] = "12000\n"
		files["memory/pod/c/memory.memsw.failcnt"] = "0\n"
		files["memory/pod/c/memory.memsw.limit_in_bytes"] = "131072\n"
	}
	return files
}

func TestReadStatsV1(t *testing.T) {
	devs := fakeBlockDevices(t)
	base := CgroupStats{
		CPU: CPUStats{UsageNanos: 123456789, UserNanos: 50000000, SystemNanos: 20000000, Periods: 10, ThrottledPeriods: 3, ThrottledNanos: 4000},
		Memory: MemoryStats{Usage: 10000, WorkingSet: 7000, RSS: 4000, Cache: 3500, PageFaults: 7, MajorPageFaults: 1,
			MaxUsage: 20000, Failcnt: 3, Kernel: 700, MappedFile: 300, OOMKills: 2},
		Processes: 4,
		IO:        []DeviceIO{{Device: "/dev/sda", Major: 8, Minor: 0, ReadBytes: 4096, WriteBytes: 8192, Reads: 3, Writes: 4}, {Device: "8:16", Major: 8, Minor: 16, WriteBytes: 512}},
	}
	limited := base
	limited.Memory.Limit = 65536
	withSwap := base
	withSwap.Swap = &SwapStats{Usage: 2000}
	withSwap.Memory.MemSwapLimit = 131072
	for _, tc := range []struct {
		name  string
		memsw bool
		limit string
		want  CgroupStats
	}{
		{"no limit, no swap accounting", false, "9223372036854771712\n", base},
		{"memory limit", false, "65536\n", limited},
		{"swap accounted", true, "9223372036854771712\n", withSwap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeCgroupFiles(t, root, v1Tree(tc.memsw, tc.limit))
			s, err := readStats(root, false, "/pod/c", devs)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(s, tc.want) {
				t.Fatalf("stats =\n %+v, want\n %+v (swap %+v)", s, tc.want, s.Swap)
			}
		})
	}
}

func TestReadStatsMissingCgroupIsNotFound(t *testing.T) {
	root := t.TempDir()
	writeCgroupFiles(t, root, v1Tree(false, "1\n"))
	for _, v2 := range []bool{false, true} {
		if _, err := readStats(root, v2, "/pod/gone", fakeBlockDevices(t)); !errors.Is(err, ErrNotFound) {
			t.Errorf("cgroup2=%v: stats of a missing cgroup: %v, want ErrNotFound", v2, err)
		}
	}
}

const psiFile = "some avg10=1.50 avg60=0.25 avg300=0.00 total=1234\nfull avg10=0.50 avg60=0.00 avg300=0.00 total=567\n"

// v2Tree is a container cgroup in a fake unified hierarchy.
func v2Tree(swap bool, memMax string, psi bool) map[string]string {
	files := map[string]string{
		"cgroup.procs":   "1\n2\n",
		"cpu.stat":       "usage_usec 2000\nuser_usec 1500\nsystem_usec 500\nnr_periods 8\nnr_throttled 2\nthrottled_usec 30\n",
		"memory.current": "8192\n",
		"memory.max":     memMax,
		"memory.stat":    "anon 4096\nfile 5000\ninactive_file 9000\npgfault 3\npgmajfault 0\nfile_mapped 100\nkernel 600\n",
		"memory.peak":    "9000\n",
		"memory.events":  "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n",
		"pids.current":   "2\n",
		"pids.max":       "64\n",
		"io.stat":        "8:0 rbytes=4096 wbytes=1024 rios=2 wios=1 dbytes=0 dios=0\n",
	}
	if swap {
		files["memory.swap.current"] = "1024\n"
		files["memory.swap.max"] = "max\n"
	}
	if psi {
		files["cpu.pressure"] = psiFile
		files["memory.pressure"] = psiFile
		files["io.pressure"] = psiFile
	}
	return files
}

func TestReadStatsV2(t *testing.T) {
	devs := fakeBlockDevices(t)
	// Inactive file pages above usage (possible between two reads) must
	// not wrap around: the working set is 0, not 2^64 - 808.
	base := CgroupStats{
		CPU: CPUStats{UsageNanos: 2000000, UserNanos: 1500000, SystemNanos: 500000, Periods: 8, ThrottledPeriods: 2, ThrottledNanos: 30000},
		Memory: MemoryStats{Usage: 8192, WorkingSet: 0, RSS: 4096, Cache: 5000, PageFaults: 3,
			MaxUsage: 9000, Failcnt: 5, Kernel: 600, MappedFile: 100, OOMKills: 1},
		Processes:      2,
		ProcessesLimit: 64,
		IO:             []DeviceIO{{Device: "/dev/sda", Major: 8, Minor: 0, ReadBytes: 4096, WriteBytes: 1024, Reads: 2, Writes: 1}},
	}
	limited := base
	limited.Memory.Limit = 1 << 20
	withSwap := base
	withSwap.Swap = &SwapStats{Usage: 1024}
	psi := &Pressure{Some: PressureData{Total: 1234, Avg10: 1.5, Avg60: 0.25}, Full: PressureData{Total: 567, Avg10: 0.5}}
	withPSI := base
	withPSI.CPUPressure, withPSI.MemoryPressure, withPSI.IOPressure = psi, psi, psi
	for _, tc := range []struct {
		name   string
		swap   bool
		memMax string
		psi    bool
		want   CgroupStats
	}{
		{"no limit, no swap, no PSI", false, "max\n", false, base},
		{"memory limit", false, "1048576\n", false, limited},
		{"swap accounted", true, "max\n", false, withSwap},
		{"pressure", false, "max\n", true, withPSI},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeCgroupFiles(t, filepath.Join(root, "pod", "c"), v2Tree(tc.swap, tc.memMax, tc.psi))
			s, err := readStats(root, true, "/pod/c", devs)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(s, tc.want) {
				t.Fatalf("stats =\n %+v, want\n %+v", s, tc.want)
			}
		})
	}
}

func TestPodCgroupRelPath(t *testing.T) {
	for _, tc := range []struct {
		parent string
		driver CgroupDriver
		want   string
		err    error
	}{
		{"/kubepods/burstable/pod123", CgroupfsDriver, "/kubepods/burstable/pod123", nil},
		{"kubepods-burstable-pod123.slice", SystemdDriver, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod123.slice", nil},
		// The kubelet's form: the slice's path.
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod123.slice", SystemdDriver, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod123.slice", nil},
		{"/kubepods.slice/kubepods-pod123.slice/../../etc", SystemdDriver, "", ErrInvalid},
		{"", CgroupfsDriver, "", ErrNotFound},
		{"", SystemdDriver, "", ErrNotFound},
		{"not-a-slice", SystemdDriver, "", ErrInvalid},
	} {
		got, err := podCgroupRelPath(tc.parent, tc.driver)
		if got != tc.want || !errors.Is(err, tc.err) && (err != nil || tc.err != nil) {
			t.Errorf("podCgroupRelPath(%q, %s) = %q, %v; want %q, %v", tc.parent, tc.driver, got, err, tc.want, tc.err)
		}
	}
}
