//go:build e2e

package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet's summary API and eviction read these every few seconds.
func TestContainerAndPodStats(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("stats")
	pod := d.runPod(t, podCfg)
	// Burn some CPU, write 1 MiB to the writable layer, then wait.
	id := d.startContainer(t, pod, podCfg, containerConfig("busy", ref, "sh", "-c",
		"i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; head -c 1048576 /dev/zero > /written; echo done; sleep 300"))
	path := d.status(t, id).GetLogPath()
	waitFor(t, "the container's work", 20*time.Second, func() bool { data, _ := os.ReadFile(path); return parseLog(data) == "done\n" })
	ctx := context.Background()

	st, err := d.Runtime.ContainerStats(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if cpu := st.GetCpu().GetUsageCoreNanoSeconds().GetValue(); cpu == 0 {
		t.Errorf("CPU usage 0 after a busy loop")
	}
	if ws := st.GetMemory().GetWorkingSetBytes().GetValue(); ws == 0 {
		t.Errorf("memory working set 0")
	}
	if w := st.GetWritableLayer().GetUsedBytes().GetValue(); w < 1<<20 {
		t.Errorf("writable layer %d bytes, want at least the 1 MiB written", w)
	}
	list, err := d.Runtime.ListContainerStats(ctx, &runtime.ContainerStatsFilter{PodSandboxId: pod})
	if err != nil || len(list) != 1 || list[0].GetAttributes().GetId() != id {
		t.Errorf("ListContainerStats = %v, %v", list, err)
	}
	ps, err := d.Runtime.PodSandboxStats(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if got := ps.GetLinux().GetCpu().GetUsageCoreNanoSeconds().GetValue(); got < st.GetCpu().GetUsageCoreNanoSeconds().GetValue() {
		t.Errorf("pod CPU %d below its container's %d", got, st.GetCpu().GetUsageCoreNanoSeconds().GetValue())
	}
	if n := len(ps.GetLinux().GetContainers()); n != 1 {
		t.Errorf("pod stats list %d containers, want 1", n)
	}
	pods, err := d.Runtime.ListPodSandboxStats(ctx, &runtime.PodSandboxStatsFilter{Id: pod})
	if err != nil || len(pods) != 1 {
		t.Errorf("ListPodSandboxStats = %v, %v", pods, err)
	}
}
