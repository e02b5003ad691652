package server

import (
	"context"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/oci"
)

// The kubelet turns each metric into a Prometheus one with the label keys
// of its descriptor: a metric without a descriptor, or with another number
// of label values, is dropped there.
func TestPodMetricsMatchTheirDescriptors(t *testing.T) {
	descs, err := (&Server{}).ListMetricDescriptors(context.Background(), &runtime.ListMetricDescriptorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
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
	rec := sandboxRecord{ID: "pod1", Metadata: podMetadata{Name: "web", Namespace: "ns"}}
	sample := podSample{
		at:         42,
		cgroup:     cg,
		net:        []network.InterfaceCounters{{Name: "eth0", RxBytes: 1000}},
		containers: []containerSample{{rec: containerRecord{ID: "c1", Image: "busybox", Metadata: containerMetadata{Name: "app"}}, stats: &runtime.ContainerStats{}, cgroup: cg}},
	}
	pm := podMetrics(rec, sample)
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
