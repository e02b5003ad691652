package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CgroupStats are the usage figures the kubelet asks of a container.
type CgroupStats struct {
	CPUUsageNanos    uint64 // cumulative CPU time
	MemoryUsage      uint64 // all memory charged, page cache included
	MemoryWorkingSet uint64 // usage less inactive file pages: what eviction looks at
	MemoryRSS        uint64 // anonymous memory
	PageFaults       uint64
	MajorPageFaults  uint64
}

// ReadCgroupStats reads the container's cgroup (spec cgroupsPath, driver)
// directly from the cgroup filesystem: the kubelet asks every few seconds
// for every container, so this must cost a few file reads, not a runtime
// process. A cgroup that is gone is ErrNotFound.
func ReadCgroupStats(cgroupsPath string, driver CgroupDriver) (CgroupStats, error) {
	rel, err := cgroupRelPath(cgroupsPath, driver)
	if err != nil {
		return CgroupStats{}, err
	}
	if currentHost().cgroup2 {
		return readStatsV2(filepath.Join(cgroupRoot, rel))
	}
	return readStatsV1(cgroupRoot, rel)
}

func readStatsV1(root, rel string) (CgroupStats, error) {
	var s CgroupStats
	var err error
	memDir := filepath.Join(root, "memory", rel)
	if s.CPUUsageNanos, err = readUint(filepath.Join(root, "cpuacct", rel, "cpuacct.usage")); err != nil {
		return s, statsError(rel, err)
	}
	if s.MemoryUsage, err = readUint(filepath.Join(memDir, "memory.usage_in_bytes")); err != nil {
		return s, statsError(rel, err)
	}
	stat, err := readKeyed(filepath.Join(memDir, "memory.stat"))
	if err != nil {
		return s, statsError(rel, err)
	}
	s.MemoryWorkingSet = saturatingSub(s.MemoryUsage, stat["total_inactive_file"])
	s.MemoryRSS = stat["total_rss"]
	s.PageFaults = stat["total_pgfault"]
	s.MajorPageFaults = stat["total_pgmajfault"]
	return s, nil
}

func readStatsV2(dir string) (CgroupStats, error) {
	var s CgroupStats
	cpu, err := readKeyed(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return s, statsError(dir, err)
	}
	s.CPUUsageNanos = cpu["usage_usec"] * 1000
	if s.MemoryUsage, err = readUint(filepath.Join(dir, "memory.current")); err != nil {
		return s, statsError(dir, err)
	}
	stat, err := readKeyed(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return s, statsError(dir, err)
	}
	s.MemoryWorkingSet = saturatingSub(s.MemoryUsage, stat["inactive_file"])
	s.MemoryRSS = stat["anon"]
	s.PageFaults = stat["pgfault"]
	s.MajorPageFaults = stat["pgmajfault"]
	return s, nil
}

func statsError(cgroup string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cgroup %s: %w", cgroup, ErrNotFound)
	}
	return fmt.Errorf("read stats of cgroup %s: %w", cgroup, err)
}

func readUint(file string) (uint64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// readKeyed reads a flat keyed cgroup file ("key value" lines).
func readKeyed(file string) (map[string]uint64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

func saturatingSub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
