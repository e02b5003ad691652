//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// kubeletResources are a container's resources as the kubelet sends them for
// a Burstable container with requests cpu=100m, memory=32Mi and limits
// cpu=500m, memory=64Mi: a zero hugepage limit for every page size the node
// has, whether or not its cgroup hierarchy has the hugetlb controller.
func kubeletResources(t *testing.T) *runtime.LinuxContainerResources {
	r := &runtime.LinuxContainerResources{
		CpuShares:          102,
		CpuQuota:           50000,
		CpuPeriod:          100000,
		MemoryLimitInBytes: 64 << 20,
		OomScoreAdj:        999,
	}
	sizes, _ := filepath.Glob("/sys/kernel/mm/hugepages/hugepages-*kB")
	for _, dir := range sizes {
		kb := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(dir), "hugepages-"), "kB")
		r.HugepageLimits = append(r.HugepageLimits, &runtime.HugepageLimit{PageSize: pageSizeName(kb)})
	}
	if len(r.HugepageLimits) == 0 {
		r.HugepageLimits = []*runtime.HugepageLimit{{PageSize: "2MB"}}
	}
	return r
}

// pageSizeName spells a page size the way the kubelet does: 2048 kB is "2MB".
func pageSizeName(kb string) string {
	switch kb {
	case "2048":
		return "2MB"
	case "1048576":
		return "1GB"
	}
	return kb + "KB"
}

func hostHasV1Hugetlb() bool {
	data, _ := os.ReadFile("/proc/self/cgroup")
	for _, line := range strings.Split(string(data), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && parts[0] != "0" && strings.Contains(","+parts[1]+",", ",hugetlb,") {
			return true
		}
	}
	return false
}

// Every container the kubelet makes carries hugepage limits; a node whose
// cgroup hierarchy lacks hugetlb must still run them, with the other limits
// applied and the skip logged once, not once per container.
func TestHugepageLimitsSkippedWithoutHugetlbController(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("knobs")
	pod := d.runPod(t, podCfg)
	var ids []string
	for _, name := range []string{"first", "second"} {
		cfg := containerConfig(name, ref, "sleep", "300")
		cfg.Linux = &runtime.LinuxContainerConfig{Resources: kubeletResources(t)}
		ids = append(ids, d.startContainer(t, pod, podCfg, cfg))
	}
	for _, f := range []struct{ file, want string }{
		{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "67108864"},
		{"/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "50000"},
		{"/sys/fs/cgroup/cpu/cpu.shares", "102"},
	} {
		if got, ok := d.execSync(t, ids[1], "cat", f.file); !ok || strings.TrimSpace(got) != f.want {
			t.Errorf("%s in the container = %q (ok %v), want %s", f.file, got, ok, f.want)
		}
	}
	if got, _ := d.execSync(t, ids[1], "cat", "/proc/self/oom_score_adj"); strings.TrimSpace(got) != "999" {
		t.Errorf("oom_score_adj in the container = %q, want 999", got)
	}
	if hostHasV1Hugetlb() {
		return
	}
	if n := strings.Count(d.Output(), "lacks the cgroup controller"); n != 1 {
		t.Errorf("the missing hugetlb controller was logged %d times for two containers, want once:\n%s", n, d.Output())
	}
	// An update with the same knobs takes the same path.
	ctx := context.Background()
	if err := d.Runtime.UpdateContainerResources(ctx, ids[0], &runtime.ContainerResources{Linux: kubeletResources(t)}); err != nil {
		t.Errorf("UpdateContainerResources with the kubelet's hugepage limits: %v", err)
	}
}
