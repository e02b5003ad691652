//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
	// No other stats call before the first: PodSandboxStats samples the
	// container too, and a ContainerStats less than minRateWindow after it
	// keeps that sample, so the daemon's window would not be the test's.
	first, second := statsTwice(t, d, id)
	if _, err := d.Runtime.PodSandboxStats(ctx, pod); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the pod's rate is over a window of its own
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

// Pod stats read while StopPodSandbox tears the network down never carry a
// network usage without its default interface: the kubelet's stats summary
// (its eviction manager reads it every 10 s) dereferences it, and a real
// kubelet crashed on one read in that window.
func TestStatsDuringStopPodSandboxKeepTheDefaultInterface(t *testing.T) {
	d := StartDaemon(t)
	d.bridgeNetwork(t)
	ctx := context.Background()
	for round := range 5 {
		pod := d.runPod(t, d.podConfig(fmt.Sprintf("stopping-%d", round)))
		stopped := make(chan error, 1)
		go func() { stopped <- d.Runtime.StopPodSandbox(ctx, pod) }()
		reads := 0
		for done := false; !done; reads++ {
			select {
			case err := <-stopped:
				if err != nil {
					t.Fatalf("StopPodSandbox: %v", err)
				}
				done = true
			default:
			}
			stats, err := d.Runtime.ListPodSandboxStats(ctx, nil)
			if err != nil {
				t.Fatalf("ListPodSandboxStats: %v", err)
			}
			for _, ps := range stats {
				if n := ps.GetLinux().GetNetwork(); n != nil && n.GetDefaultInterface() == nil {
					t.Fatalf("round %d, read %d: pod %s has network usage without its default interface: %v",
						round, reads, ps.GetAttributes().GetId(), n)
				}
			}
		}
		t.Logf("round %d: %d stats reads while the pod stopped", round, reads)
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

	keys := metricDescriptorKeys(t, d)
	named := []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "container_memory_usage_bytes",
		"container_memory_rss", "container_network_receive_bytes_total", "container_processes", "container_fs_usage_bytes"}
	for _, n := range named {
		if _, ok := keys[n]; !ok {
			t.Errorf("no descriptor for %s", n)
		}
	}
	values := containerMetricValues(t, d, keys, pod, id)
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

// cadvisorNames are the metrics of cAdvisor's /metrics/cadvisor that the CRI
// validation suite expects ListPodSandboxMetrics to carry beyond the usage
// ones.
var cadvisorNames = []string{
	"container_blkio_device_usage_total", "container_file_descriptors", "container_fs_inodes_free",
	"container_fs_inodes_total", "container_fs_limit_bytes", "container_last_seen", "container_memory_failcnt",
	"container_memory_kernel_usage", "container_memory_mapped_file", "container_memory_max_usage_bytes",
	"container_oom_events_total", "container_sockets", "container_spec_cpu_period", "container_spec_cpu_shares",
	"container_spec_memory_swap_limit_bytes", "container_start_time_seconds", "container_threads", "container_threads_max",
}

// metricDescriptorKeys are the number of label keys of each metric
// ListMetricDescriptors names.
func metricDescriptorKeys(t *testing.T, d *Daemon) map[string]int {
	t.Helper()
	descs, err := d.Runtime.ListMetricDescriptors(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]int{}
	for _, desc := range descs {
		keys[desc.GetName()] = len(desc.GetLabelKeys())
	}
	return keys
}

// containerMetricValues reads the metrics of container id, the one of the
// one pod, by name (the highest of a name that has several label sets),
// each with its descriptor's number of labels.
func containerMetricValues(t *testing.T, d *Daemon, keys map[string]int, pod, id string) map[string]uint64 {
	t.Helper()
	pods, err := d.Runtime.ListPodSandboxMetrics(context.Background())
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
		values[m.GetName()] = max(values[m.GetName()], m.GetValue().GetValue())
	}
	return values
}

// A real container, with a CPU and a memory limit, has every one of
// cAdvisor's figures, each plausible; an OOM kill in it shows.
func TestPodMetricsCarryCAdvisorsFullSet(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("cadvisor")
	pod := d.runPod(t, podCfg)
	before := time.Now()
	// Two more descriptors than stdio; once told, a direct write, which
	// the block cgroup accounts to the container.
	cfg := containerConfig("app", ref, "sh", "-c",
		"exec 3</dev/null 4</dev/null; echo ready; while [ ! -e /go ]; do sleep 0.1; done; "+
			"dd if=/dev/zero of=/direct bs=4096 count=64 oflag=direct; echo written; sleep 300")
	cfg.Linux = &runtime.LinuxContainerConfig{Resources: &runtime.LinuxContainerResources{
		CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 64 << 20,
	}}
	id := d.startContainer(t, pod, podCfg, cfg)
	path := d.status(t, id).GetLogPath()
	waitFor(t, "the container's start", 20*time.Second, func() bool { data, _ := os.ReadFile(path); return parseLog(data) == "ready\n" })
	ctx := context.Background()
	accountBlockIO(t, d, id)
	if _, _, err := d.Runtime.ExecSync(ctx, id, []string{"touch", "/go"}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the container's write", 20*time.Second, func() bool {
		data, _ := os.ReadFile(path)
		return strings.HasSuffix(parseLog(data), "written\n")
	})

	keys := metricDescriptorKeys(t, d)
	values := containerMetricValues(t, d, keys, pod, id)
	for _, n := range cadvisorNames {
		if _, ok := keys[n]; !ok {
			t.Errorf("no descriptor for %s", n)
		}
		if _, ok := values[n]; !ok {
			t.Errorf("no %s for the container", n)
		}
	}
	within := func(name string, lo, hi uint64) {
		if v := values[name]; v < lo || v > hi {
			t.Errorf("%s = %d, want within [%d, %d]", name, v, lo, hi)
		}
	}
	now := uint64(time.Now().Unix())
	within("container_start_time_seconds", uint64(before.Unix()), now)
	within("container_last_seen", uint64(before.Unix()), now)
	within("container_threads", 1, 100)
	within("container_file_descriptors", 5, 1000) // stdio and the two opened
	within("container_spec_cpu_period", 100000, 100000)
	within("container_spec_cpu_shares", 512, 512)
	within("container_oom_events_total", 0, 0)
	within("container_memory_max_usage_bytes", values["container_memory_usage_bytes"], 64<<20)
	within("container_fs_inodes_total", values["container_fs_inodes_free"]+1, 1<<40)
	within("container_fs_limit_bytes", values["container_fs_usage_bytes"]+1, 1<<62)
	if v := values["container_blkio_device_usage_total"]; v < 64*4096 {
		data, _ := os.ReadFile(path)
		t.Errorf("container_blkio_device_usage_total = %d, want the %d bytes written at least; the container's log:\n%s", v, 64*4096, data)
	}

	// The OOM killer ends a process of the container that outgrows its
	// limit; the container goes on.
	if _, _, err := d.Runtime.ExecSync(ctx, id, []string{"sh", "-c", "head -c 268435456 /dev/zero | tail"}, 30*time.Second); err != nil {
		t.Logf("ExecSync of the OOM: %v", err)
	}
	values = containerMetricValues(t, d, keys, pod, id)
	within("container_oom_events_total", 1, 10)
	within("container_memory_max_usage_bytes", 32<<20, 64<<20)
}

// accountBlockIO makes a cgroup v1 kernel account the container's block
// IO: since 6.x one counts a blkio cgroup's IO only while it has a throttle
// rule, here one no IO reaches, on the device of the daemon's state root
// (where the container's writable layer is), as an operator's IO limit
// would. Nothing to do on cgroup v2, which always accounts.
func accountBlockIO(t *testing.T, d *Daemon, id string) {
	t.Helper()
	if _, err := os.Stat("/sys/fs/cgroup/blkio"); err != nil {
		return
	}
	out, _, err := d.Runtime.ExecSync(context.Background(), id, []string{"cat", "/proc/self/cgroup"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rel string
	for line := range strings.Lines(string(out)) {
		if parts := strings.SplitN(strings.TrimSpace(line), ":", 3); len(parts) == 3 && strings.Contains(","+parts[1]+",", ",blkio,") {
			rel = parts[2]
		}
	}
	if rel == "" {
		t.Fatalf("no blkio cgroup in the container's /proc/self/cgroup:\n%s", out)
	}
	var st unix.Stat_t
	if err := unix.Stat(d.Root, &st); err != nil {
		t.Fatal(err)
	}
	rule := fmt.Sprintf("%d:%d %d", unix.Major(st.Dev), unix.Minor(st.Dev), uint64(1)<<40)
	for _, knob := range []string{"blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device"} {
		if err := os.WriteFile(filepath.Join("/sys/fs/cgroup/blkio", rel, knob), []byte(rule), 0o644); err != nil {
			t.Fatalf("set %s: %v", knob, err)
		}
	}
}
