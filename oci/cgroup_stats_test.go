package oci

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

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

func TestReadStatsV1(t *testing.T) {
	root := t.TempDir()
	writeCgroupFiles(t, root, map[string]string{
		"cpuacct/pod/c/cpuacct.usage":        "123456789\n",
		"memory/pod/c/memory.usage_in_bytes": "10000\n",
		"memory/pod/c/memory.stat":           "cache 5\ntotal_inactive_file 3000\ntotal_rss 4000\ntotal_pgfault 7\ntotal_pgmajfault 1\n",
	})
	s, err := readStatsV1(root, "/pod/c")
	if err != nil {
		t.Fatal(err)
	}
	want := CgroupStats{CPUUsageNanos: 123456789, MemoryUsage: 10000, MemoryWorkingSet: 7000, MemoryRSS: 4000, PageFaults: 7, MajorPageFaults: 1}
	if s != want {
		t.Fatalf("stats = %+v, want %+v", s, want)
	}
	if _, err := readStatsV1(root, "/pod/gone"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stats of a missing cgroup: %v, want ErrNotFound", err)
	}
}

func TestReadStatsV2(t *testing.T) {
	dir := t.TempDir()
	writeCgroupFiles(t, dir, map[string]string{
		"cpu.stat":       "usage_usec 2000\nuser_usec 1500\n",
		"memory.current": "8192\n",
		"memory.stat":    "anon 4096\ninactive_file 9000\npgfault 3\npgmajfault 0\n",
	})
	s, err := readStatsV2(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Inactive file pages above usage (possible between two reads) must
	// not wrap around.
	want := CgroupStats{CPUUsageNanos: 2000000, MemoryUsage: 8192, MemoryWorkingSet: 0, MemoryRSS: 4096, PageFaults: 3}
	if s != want {
		t.Fatalf("stats = %+v, want %+v", s, want)
	}
}
