package stats

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// The kubelet turns each metric into a Prometheus one with the label keys
// of its descriptor: a metric without a descriptor, or with another number
// of label values, is dropped there.
func TestPodMetricsMatchTheirDescriptors(t *testing.T) {
	descs := &runtime.ListMetricDescriptorsResponse{Descriptors: Descriptors()}
	keys := map[string]int{}
	for _, d := range descs.GetDescriptors() {
		if _, dup := keys[d.GetName()]; dup {
			t.Errorf("descriptor %s listed twice", d.GetName())
		}
		keys[d.GetName()] = len(d.GetLabelKeys())
	}
	psi := &oci.Pressure{Some: oci.PressureData{Total: 3_000_000}, Full: oci.PressureData{Total: 1_000_000}}
	cg := &oci.CgroupStats{
		CPU:         oci.CPUStats{UsageNanos: 2_500_000_000},
		Memory:      oci.MemoryStats{Usage: 100, WorkingSet: 60},
		Swap:        &oci.SwapStats{Usage: 5},
		IO:          []oci.DeviceIO{{Device: "/dev/sda", ReadBytes: 7}},
		CPUPressure: psi, MemoryPressure: psi, IOPressure: psi,
	}
	rec := lifecycle.SandboxRecord{ID: "pod1", Metadata: lifecycle.PodMetadata{Name: "web", Namespace: "ns"}}
	sample := PodSample{
		At:         42,
		Cgroup:     cg,
		Net:        []network.InterfaceCounters{{Name: "eth0", RxBytes: 1000}},
		Containers: []ContainerSample{{Rec: lifecycle.ContainerRecord{ID: "c1", Image: "busybox", Metadata: lifecycle.ContainerMetadata{Name: "app"}}, Stats: &runtime.ContainerStats{}, Cgroup: cg}},
	}
	pm := PodMetrics(rec, sample)
	if len(pm.GetContainerMetrics()) != 1 || pm.GetContainerMetrics()[0].GetContainerId() != "c1" {
		t.Fatalf("container metrics = %v, want those of c1", pm.GetContainerMetrics())
	}
	got := map[string]*runtime.Metric{}
	all := append(append([]*runtime.Metric(nil), pm.GetMetrics()...), pm.GetContainerMetrics()[0].GetMetrics()...)
	for _, m := range all {
		n, ok := keys[m.GetName()]
		if !ok {
			t.Errorf("metric %s has no descriptor", m.GetName())
		} else if len(m.GetLabelValues()) != n {
			t.Errorf("metric %s has %d label values, its descriptor %d keys", m.GetName(), len(m.GetLabelValues()), n)
		}
		if m.GetTimestamp() != 42 {
			t.Errorf("metric %s timestamp %d, want the sample's", m.GetName(), m.GetTimestamp())
		}
		got[m.GetName()+"/"+m.GetLabelValues()[0]] = m
	}
	for _, tc := range []struct {
		key  string
		want uint64
	}{
		{"container_cpu_usage_seconds_total/app", 2},
		{"container_cpu_usage_seconds_total/", 2}, // the pod's cgroup
		{"container_memory_working_set_bytes/app", 60},
		{"container_memory_swap/app", 5},
		{"container_fs_reads_bytes_total/app", 7},
		{"container_pressure_cpu_waiting_seconds_total/app", 3},
		{"container_pressure_io_stalled_seconds_total/app", 1},
		{"container_network_receive_bytes_total/", 1000},
	} {
		m, ok := got[tc.key]
		if !ok {
			t.Errorf("no metric %s", tc.key)
			continue
		}
		if v := m.GetValue().GetValue(); v != tc.want {
			t.Errorf("%s = %d, want %d", tc.key, v, tc.want)
		}
	}
	if l := got["container_cpu_usage_seconds_total/app"].GetLabelValues(); l[1] != "c1" || l[2] != "busybox" || l[4] != "ns" || l[5] != "web" || l[6] != "total" {
		t.Errorf("container CPU labels = %q", l)
	}
}

// The figures cAdvisor's /metrics/cadvisor serves beyond the usage ones,
// which the CRI validation suite now expects from ListPodSandboxMetrics:
// each from the reading it comes from, with cAdvisor's labels.
func TestPodMetricsCarryCAdvisorsFullSet(t *testing.T) {
	cg := &oci.CgroupStats{
		Memory:    oci.MemoryStats{Usage: 100, MaxUsage: 150, Failcnt: 4, Kernel: 30, MappedFile: 20, OOMKills: 1, MemSwapLimit: 4096},
		IO:        []oci.DeviceIO{{Device: "/dev/sda", Major: 8, Minor: 0, ReadBytes: 7, WriteBytes: 9}},
		Processes: 5, ProcessesLimit: 64,
	}
	started := int64(1_700_000_000) * int64(time.Second)
	rec := lifecycle.SandboxRecord{ID: "pod1", CreatedAt: started - int64(time.Second), Metadata: lifecycle.PodMetadata{Name: "web", Namespace: "ns"}}
	ctr := ContainerSample{
		Rec:    lifecycle.ContainerRecord{ID: "c1", Image: "busybox", StartedAt: started, Metadata: lifecycle.ContainerMetadata{Name: "app"}},
		Stats:  &runtime.ContainerStats{WritableLayer: &runtime.FilesystemUsage{UsedBytes: &runtime.UInt64Value{Value: 11}}},
		Cgroup: cg,
		Procs:  &oci.ProcessStats{Processes: 2, FileDescriptors: 9, Sockets: 3},
		Facts:  containerFacts{cpuPeriod: 100_000, cpuShares: 512},
		FS:     &fsFigures{device: "/dev/vda1", limit: 1 << 30, inodes: 1000, inodesFree: 600},
	}
	at := started + 5*int64(time.Second)
	pm := PodMetrics(rec, PodSample{At: at, Cgroup: cg, Containers: []ContainerSample{ctr}})
	descs := &runtime.ListMetricDescriptorsResponse{Descriptors: Descriptors()}
	keys := map[string][]string{}
	for _, d := range descs.GetDescriptors() {
		keys[d.GetName()] = d.GetLabelKeys()
	}
	type key struct{ name, extra string }
	got := map[key]uint64{}
	for _, m := range pm.GetContainerMetrics()[0].GetMetrics() {
		l := m.GetLabelValues()
		if len(l) != len(keys[m.GetName()]) {
			t.Fatalf("%s: label values %q for keys %q", m.GetName(), l, keys[m.GetName()])
		}
		got[key{m.GetName(), strings.Join(l[len(baseLabelKeys):], ",")}] = m.GetValue().GetValue()
	}
	for _, tc := range []struct {
		name, extra string
		want        uint64
	}{
		{"container_blkio_device_usage_total", "/dev/sda,8,0,Read", 7},
		{"container_blkio_device_usage_total", "/dev/sda,8,0,Write", 9},
		{"container_file_descriptors", "", 9},
		{"container_sockets", "", 3},
		{"container_processes", "", 2}, // cgroup.procs: pids.current counts threads
		{"container_threads", "", 5},
		{"container_threads_max", "", 64},
		{"container_fs_inodes_free", "/dev/vda1", 600},
		{"container_fs_inodes_total", "/dev/vda1", 1000},
		{"container_fs_limit_bytes", "/dev/vda1", 1 << 30},
		{"container_fs_usage_bytes", "/dev/vda1", 11},
		{"container_last_seen", "", 1_700_000_005},
		{"container_start_time_seconds", "", 1_700_000_000},
		{"container_memory_failcnt", "", 4},
		{"container_memory_kernel_usage", "", 30},
		{"container_memory_mapped_file", "", 20},
		{"container_memory_max_usage_bytes", "", 150},
		{"container_oom_events_total", "", 1},
		{"container_spec_cpu_period", "", 100_000},
		{"container_spec_cpu_shares", "", 512},
		{"container_spec_memory_swap_limit_bytes", "", 4096},
	} {
		v, ok := got[key{tc.name, tc.extra}]
		if !ok {
			t.Errorf("no %s{%s} for the container", tc.name, tc.extra)
		} else if v != tc.want {
			t.Errorf("%s{%s} = %d, want %d", tc.name, tc.extra, v, tc.want)
		}
	}
	pod := map[string]uint64{}
	for _, m := range pm.GetMetrics() {
		pod[m.GetName()] = m.GetValue().GetValue()
	}
	for name, want := range map[string]uint64{
		"container_start_time_seconds": 1_699_999_999, "container_oom_events_total": 1,
		"container_memory_max_usage_bytes": 150, "container_threads": 5,
	} {
		if v, ok := pod[name]; !ok || v != want {
			t.Errorf("pod's %s = %d (present %v), want %d", name, v, ok, want)
		}
	}
}

// A container's config is decoded for its CPU figures once, and again only
// when UpdateContainerResources changed it.
func TestContainerFactsFollowTheConfig(t *testing.T) {
	c := &factCache{facts: map[string]*containerFacts{}}
	encode := func(r *runtime.LinuxContainerResources) []byte {
		raw, err := proto.Marshal(&runtime.ContainerConfig{Linux: &runtime.LinuxContainerConfig{Resources: r}})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	rec := lifecycle.ContainerRecord{ID: "c1", Config: encode(nil)}
	f, err := c.get(rec, "")
	if err != nil || f.cpuPeriod != defaultCPUPeriod || f.cpuShares != defaultCPUShares {
		t.Fatalf("facts of a config without resources = %+v, %v; want the kernel's defaults", f, err)
	}
	rec.Config = encode(&runtime.LinuxContainerResources{CpuPeriod: 50_000, CpuQuota: 25_000, CpuShares: 256})
	if f, _ = c.get(rec, t.TempDir()); f.cpuPeriod != 50_000 || f.cpuShares != 256 || f.fsDevice == "" {
		t.Errorf("facts after an update = %+v, want period 50000, shares 256 and a device", f)
	}
	c.keepOnly(map[string]bool{})
	if len(c.facts) != 0 {
		t.Errorf("facts of a removed container kept: %v", c.facts)
	}
}
