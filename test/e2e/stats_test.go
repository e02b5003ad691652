//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	goruntime "runtime"
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
	if n := ps.GetLinux().GetNetwork(); n != nil {
		t.Errorf("a host-network pod reports network counters %v; the node's are not the pod's", n)
	}
	pods, err := d.Runtime.ListPodSandboxStats(ctx, &runtime.PodSandboxStatsFilter{Id: pod})
	if err != nil || len(pods) != 1 {
		t.Errorf("ListPodSandboxStats = %v, %v", pods, err)
	}
}

// statsTwice samples a container's stats twice, a second apart: the runtime
// reports usage_nano_cores as the rate between two calls.
func statsTwice(t *testing.T, d *Daemon, id string) (first, second *runtime.ContainerStats) {
	t.Helper()
	ctx := context.Background()
	first, err := d.Runtime.ContainerStats(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	second, err = d.Runtime.ContainerStats(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return first, second
}

// busyLoopFloor is the least CPU a busy loop should show: half a core on a
// quiet machine, half its fair share of the cores on a loaded one (this
// suite shares 2 cores with builds and other suites: at a load of 13 a loop
// gets about 0.15 core).
func busyLoopFloor(t *testing.T) float64 {
	data, err := os.ReadFile("/proc/loadavg")
	var load float64
	if err == nil {
		_, err = fmt.Sscan(string(data), &load)
	}
	if err != nil {
		t.Fatalf("read the load average: %v", err)
	}
	share := min(1, float64(goruntime.NumCPU())/(load+1))
	return share / 2
}

// The kubelet takes a container's CPU rate from the runtime (kubectl top,
// HPA): a container burning a core shows close to one core.
func TestStatsCPURateOfABusyContainer(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("cpu")
	pod := d.runPod(t, podCfg)
	id := d.startContainer(t, pod, podCfg, containerConfig("burn", ref, "sh", "-c", "while :; do :; done"))
	ctx := context.Background()
	if _, err := d.Runtime.PodSandboxStats(ctx, pod); err != nil {
		t.Fatal(err)
	}
	first, second := statsTwice(t, d, id)
	if first.GetCpu().GetUsageNanoCores() != nil && first.GetCpu().GetUsageNanoCores().GetValue() == 0 {
		t.Errorf("first sample reports a rate of 0; want none (unset) or a real one")
	}
	rate := second.GetCpu().GetUsageNanoCores()
	if rate == nil {
		t.Fatalf("no usage_nano_cores on the second sample: %v", second.GetCpu())
	}
	// The rate is the one between the two calls; the machine is shared, so
	// the core the loop gets is not asserted tightly.
	dt := second.GetCpu().GetTimestamp() - first.GetCpu().GetTimestamp()
	dcpu := second.GetCpu().GetUsageCoreNanoSeconds().GetValue() - first.GetCpu().GetUsageCoreNanoSeconds().GetValue()
	want := float64(dcpu) / float64(dt) * 1e9
	if got := float64(rate.GetValue()); got < 0.9*want || got > 1.1*want {
		t.Errorf("usage_nano_cores %.0f, but the cumulative figures give %.0f over %s", got, want, time.Duration(dt))
	}
	floor := busyLoopFloor(t)
	if got := float64(rate.GetValue()) / 1e9; got < floor {
		t.Errorf("a busy loop shows %.2f cores, want at least %.2f", got, floor)
	}
	ps, err := d.Runtime.PodSandboxStats(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if r := ps.GetLinux().GetCpu().GetUsageNanoCores().GetValue(); float64(r)/1e9 < floor {
		t.Errorf("the pod's rate %.2f cores, want at least %.2f with its container burning one", float64(r)/1e9, floor)
	}
	if n := ps.GetLinux().GetProcess().GetProcessCount().GetValue(); n < 1 {
		t.Errorf("the pod's process count %d, want its running shell counted", n)
	}
}

// Eviction and the OOM-kill ranking look at the working set; the writable
// layer counts against ephemeral storage.
func TestStatsMemoryAndWritableLayer(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("mem")
	pod := d.runPod(t, podCfg)
	// 50 MiB in the pod's tmpfs /dev/shm (charged to the container and
	// never reclaimable page cache), 10 MiB into the rootfs.
	id := d.startContainer(t, pod, podCfg, containerConfig("alloc", ref, "sh", "-c",
		"head -c 52428800 /dev/zero > /dev/shm/fill && head -c 10485760 /dev/zero > /written && sync && echo done; sleep 300"))
	path := d.status(t, id).GetLogPath()
	waitFor(t, "the container's writes", 30*time.Second, func() bool { data, _ := os.ReadFile(path); return parseLog(data) == "done\n" })

	st, err := d.Runtime.ContainerStats(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	mem := st.GetMemory()
	if ws := mem.GetWorkingSetBytes().GetValue(); ws < 50<<20 {
		t.Errorf("working set %d bytes, want at least the 50 MiB held", ws)
	}
	if u := mem.GetUsageBytes().GetValue(); u < mem.GetWorkingSetBytes().GetValue() {
		t.Errorf("usage %d below working set %d", u, mem.GetWorkingSetBytes().GetValue())
	}
	if mem.GetAvailableBytes() != nil {
		t.Errorf("available bytes %d reported without a memory limit", mem.GetAvailableBytes().GetValue())
	}
	if w := st.GetWritableLayer().GetUsedBytes().GetValue(); w < 10<<20 {
		t.Errorf("writable layer %d bytes, want at least the 10 MiB written", w)
	}
	if n := st.GetWritableLayer().GetInodesUsed().GetValue(); n == 0 {
		t.Errorf("writable layer uses 0 inodes after a file was written")
	}
}

// The kubelet reports a pod's network from the runtime: counters of the
// pod's own interface, growing with traffic to the pod's IP.
func TestStatsPodNetworkCountersGrow(t *testing.T) {
	d := StartDaemon(t)
	d.bridgeNetwork(t)
	pod := d.runPod(t, d.podConfig("net"))
	ctx := context.Background()
	resp, err := d.Runtime.PodSandboxStatus(ctx, pod, false)
	if err != nil {
		t.Fatal(err)
	}
	ip := resp.GetStatus().GetNetwork().GetIp()
	rx := func() uint64 {
		t.Helper()
		ps, err := d.Runtime.PodSandboxStats(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		n := ps.GetLinux().GetNetwork()
		if n.GetDefaultInterface().GetName() != "eth0" {
			t.Fatalf("default interface %q, want eth0 (interfaces %v)", n.GetDefaultInterface().GetName(), n.GetInterfaces())
		}
		return n.GetDefaultInterface().GetRxBytes().GetValue()
	}
	before := rx()
	// UDP to a port nobody listens on: the datagrams still arrive on eth0.
	// An unconnected socket, so that the ICMP errors coming back do not
	// fail the next writes.
	conn, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dst := &net.UDPAddr{IP: net.ParseIP(ip), Port: 9}
	payload := make([]byte, 1000)
	for range 20 {
		if _, err := conn.WriteTo(payload, dst); err != nil {
			t.Fatalf("send to the pod at %s: %v", ip, err)
		}
	}
	var after uint64
	deadline := time.Now().Add(10 * time.Second)
	for after = rx(); after < before+20*1000; after = rx() {
		if time.Now().After(deadline) {
			t.Fatalf("the pod's rx bytes went from %d to %d after 20 kB were sent to %s", before, after, ip)
		}
		time.Sleep(50 * time.Millisecond)
	}

	metrics, err := d.Runtime.ListPodSandboxMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, pm := range metrics {
		for _, m := range pm.GetMetrics() {
			l := m.GetLabelValues()
			if pm.GetPodSandboxId() == pod && m.GetName() == "container_network_receive_bytes_total" && l[len(l)-1] == "eth0" {
				found = m.GetValue().GetValue() >= before+20*1000
			}
		}
	}
	if !found {
		t.Errorf("ListPodSandboxMetrics has no container_network_receive_bytes_total of eth0 with the traffic: %v", metrics)
	}
}

// A pod's CPU is a counter: it must not drop when one of its containers
// exits (the kubelet would compute a negative rate).
func TestStatsPodCPUMonotonicAcrossContainerExit(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("mono")
	pod := d.runPod(t, podCfg)
	d.startContainer(t, pod, podCfg, containerConfig("stay", ref, "sleep", "300"))
	burner := d.startContainer(t, pod, podCfg, containerConfig("burn", ref, "sh", "-c",
		"i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo done; sleep 2"))
	path := d.status(t, burner).GetLogPath()
	waitFor(t, "the burner's loop", 60*time.Second, func() bool { data, _ := os.ReadFile(path); return parseLog(data) == "done\n" })
	ctx := context.Background()
	before, err := d.Runtime.PodSandboxStats(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	cpuBefore := before.GetLinux().GetCpu().GetUsageCoreNanoSeconds().GetValue()
	var burnerCPU uint64
	for _, c := range before.GetLinux().GetContainers() {
		if c.GetAttributes().GetId() == burner {
			burnerCPU = c.GetCpu().GetUsageCoreNanoSeconds().GetValue()
		}
	}
	if burnerCPU == 0 || cpuBefore < burnerCPU {
		t.Fatalf("pod CPU %d, its burning container's %d: want the pod's to hold the container's", cpuBefore, burnerCPU)
	}
	d.waitExited(t, burner, 30*time.Second)
	after, err := d.Runtime.PodSandboxStats(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if cpuAfter := after.GetLinux().GetCpu().GetUsageCoreNanoSeconds().GetValue(); cpuAfter < cpuBefore {
		t.Errorf("pod CPU went from %d to %d when a container exited; it must not go backwards", cpuBefore, cpuAfter)
	}
	if n := len(after.GetLinux().GetContainers()); n != 1 {
		t.Errorf("pod stats list %d containers after one exited, want the 1 running", n)
	}
}

// The kubelet's /metrics/cadvisor, with stats from the CRI, is built from
// these two RPCs.
func TestMetricDescriptorsAndPodMetrics(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("metrics")
	pod := d.runPod(t, podCfg)
	id := d.startContainer(t, pod, podCfg, containerConfig("app", ref, "sh", "-c", "head -c 8388608 /dev/zero > /dev/shm/x; echo done; sleep 300"))
	path := d.status(t, id).GetLogPath()
	waitFor(t, "the container's write", 20*time.Second, func() bool { data, _ := os.ReadFile(path); return parseLog(data) == "done\n" })
	ctx := context.Background()

	descs, err := d.Runtime.ListMetricDescriptors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]int{}
	for _, desc := range descs {
		keys[desc.GetName()] = len(desc.GetLabelKeys())
	}
	named := []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "container_memory_usage_bytes",
		"container_memory_rss", "container_network_receive_bytes_total", "container_processes", "container_fs_usage_bytes"}
	for _, n := range named {
		if _, ok := keys[n]; !ok {
			t.Errorf("no descriptor for %s", n)
		}
	}
	pods, err := d.Runtime.ListPodSandboxMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].GetPodSandboxId() != pod || len(pods[0].GetContainerMetrics()) != 1 || pods[0].GetContainerMetrics()[0].GetContainerId() != id {
		t.Fatalf("ListPodSandboxMetrics = %v, want the pod and its container", pods)
	}
	values := map[string]uint64{}
	for _, m := range pods[0].GetContainerMetrics()[0].GetMetrics() {
		if n, ok := keys[m.GetName()]; !ok || n != len(m.GetLabelValues()) {
			t.Errorf("metric %s: %d label values, descriptor keys %d (described: %v)", m.GetName(), len(m.GetLabelValues()), n, ok)
		}
		values[m.GetName()] = m.GetValue().GetValue()
	}
	if v := values["container_memory_working_set_bytes"]; v < 8<<20 {
		t.Errorf("container_memory_working_set_bytes %d, want at least the 8 MiB held", v)
	}
	if v := values["container_processes"]; v < 1 {
		t.Errorf("container_processes %d, want its shell counted", v)
	}
	if _, ok := values["container_cpu_usage_seconds_total"]; !ok {
		t.Errorf("no container_cpu_usage_seconds_total for the container: %v", values)
	}
}
