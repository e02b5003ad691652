package server

import (
	"context"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/oci"
)

// ListPodSandboxMetrics reports, for every ready pod, the metrics that
// ListMetricDescriptors names: the pod's cgroup and network figures, and
// each running container's. They come from the same reading as
// PodSandboxStats. A pod whose figures cannot be read is left out with a
// log line: one pod must not empty the kubelet's whole scrape.
func (s *Server) ListPodSandboxMetrics(ctx context.Context, req *runtime.ListPodSandboxMetricsRequest) (*runtime.ListPodSandboxMetricsResponse, error) {
	var out []*runtime.PodSandboxMetrics
	for _, rec := range s.sandboxes.List() {
		if rec.State != stateReady {
			continue
		}
		sample, err := s.sandboxSample(rec)
		if err != nil {
			s.log.WithError(err).WithField("pod", rec.ID).Warn("no metrics for the pod")
			continue
		}
		out = append(out, podMetrics(rec, sample))
	}
	return &runtime.ListPodSandboxMetricsResponse{PodMetrics: out}, nil
}

func podMetrics(rec sandboxRecord, sample podSample) *runtime.PodSandboxMetrics {
	pm := &runtime.PodSandboxMetrics{PodSandboxId: rec.ID}
	pod := &metricSink{at: sample.at, base: []string{"", rec.ID, "", "", rec.Metadata.Namespace, rec.Metadata.Name}}
	if sample.cgroup != nil {
		pod.cgroup(sample.cgroup)
	}
	pod.network(sample.net)
	pm.Metrics = pod.out
	for _, c := range sample.containers {
		m := &metricSink{at: sample.at, base: []string{c.rec.Metadata.Name, c.rec.ID, c.rec.Image, c.rec.Metadata.Name, rec.Metadata.Namespace, rec.Metadata.Name}}
		m.cgroup(c.cgroup)
		if w := c.stats.GetWritableLayer(); w != nil {
			m.add(mFsUsage, w.GetUsedBytes().GetValue())
		}
		pm.ContainerMetrics = append(pm.ContainerMetrics, &runtime.ContainerMetrics{ContainerId: c.rec.ID, Metrics: m.out})
	}
	return pm
}

// metricSink collects the metrics of one container (or of the pod), all
// with the same base label values and timestamp.
type metricSink struct {
	at   int64
	base []string
	out  []*runtime.Metric
}

func (m *metricSink) add(d *metricDef, v uint64, extra ...string) {
	m.out = append(m.out, &runtime.Metric{
		Name:        d.name,
		Timestamp:   m.at,
		MetricType:  d.typ,
		LabelValues: append(append([]string(nil), m.base...), extra...),
		Value:       &runtime.UInt64Value{Value: v},
	})
}

const nsPerSec = uint64(time.Second)

func (m *metricSink) cgroup(cg *oci.CgroupStats) {
	m.add(mCPUUsage, cg.CPU.UsageNanos/nsPerSec, "total")
	m.add(mCPUUser, cg.CPU.UserNanos/nsPerSec)
	m.add(mCPUSystem, cg.CPU.SystemNanos/nsPerSec)
	m.add(mCFSPeriods, cg.CPU.Periods)
	m.add(mCFSThrottled, cg.CPU.ThrottledPeriods)
	m.add(mCFSThrottledSecs, cg.CPU.ThrottledNanos/nsPerSec)
	m.add(mMemUsage, cg.Memory.Usage)
	m.add(mMemWorkingSet, cg.Memory.WorkingSet)
	m.add(mMemRSS, cg.Memory.RSS)
	m.add(mMemCache, cg.Memory.Cache)
	if cg.Swap != nil {
		m.add(mMemSwap, cg.Swap.Usage)
	}
	// The counts read are the cgroup's and its children's: cAdvisor's
	// "hierarchy" scope. A container's cgroup has no children, so its
	// "container" scope is the same figure.
	for _, scope := range []string{"container", "hierarchy"} {
		m.add(mMemFailures, cg.Memory.PageFaults, "pgfault", scope)
		m.add(mMemFailures, cg.Memory.MajorPageFaults, "pgmajfault", scope)
	}
	m.add(mMemLimit, cg.Memory.Limit)
	m.add(mProcesses, cg.Processes)
	for _, d := range cg.IO {
		m.add(mFsReadBytes, d.ReadBytes, d.Device)
		m.add(mFsWriteBytes, d.WriteBytes, d.Device)
		m.add(mFsReads, d.Reads, d.Device)
		m.add(mFsWrites, d.Writes, d.Device)
	}
	// The kernel counts stall time in microseconds.
	for _, p := range []struct {
		psi  *oci.Pressure
		defs pressureDefs
	}{
		{cg.CPUPressure, mCPUPressure},
		{cg.MemoryPressure, mMemPressure},
		{cg.IOPressure, mIOPressure},
	} {
		if p.psi != nil {
			m.add(p.defs.waiting, p.psi.Some.Total/1e6)
			m.add(p.defs.stalled, p.psi.Full.Total/1e6)
		}
	}
}

func (m *metricSink) network(ifs []network.InterfaceCounters) {
	for _, i := range ifs {
		m.add(mNetRx.bytes, i.RxBytes, i.Name)
		m.add(mNetRx.packets, i.RxPackets, i.Name)
		m.add(mNetRx.dropped, i.RxDropped, i.Name)
		m.add(mNetRx.errors, i.RxErrors, i.Name)
		m.add(mNetTx.bytes, i.TxBytes, i.Name)
		m.add(mNetTx.packets, i.TxPackets, i.Name)
		m.add(mNetTx.dropped, i.TxDropped, i.Name)
		m.add(mNetTx.errors, i.TxErrors, i.Name)
	}
}
