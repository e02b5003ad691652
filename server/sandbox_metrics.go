package server

import (
	"context"
	"strconv"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// ListPodSandboxMetrics reports, for every ready pod, the metrics that
// ListMetricDescriptors names: the pod's cgroup and network figures, and
// each running container's. They come from the same reading as
// PodSandboxStats. A pod whose figures cannot be read is left out with a
// log line: one pod must not empty the kubelet's whole scrape.
func (s *Server) ListPodSandboxMetrics(ctx context.Context, req *runtime.ListPodSandboxMetricsRequest) (*runtime.ListPodSandboxMetricsResponse, error) {
	var out []*runtime.PodSandboxMetrics
	seen := map[string]bool{}
	for _, rec := range s.sandboxes.List() {
		if rec.State != lifecycle.StateReady {
			continue
		}
		sample, err := s.sandboxSample(rec)
		if err != nil {
			s.log.WithError(err).WithField("pod", rec.ID).Warn("no metrics for the pod")
			continue
		}
		for i := range sample.containers {
			s.readMetricsOnly(&sample.containers[i])
			seen[sample.containers[i].rec.ID] = true
		}
		out = append(out, podMetrics(rec, sample))
	}
	containerFactsCache.keepOnly(seen)
	return &runtime.ListPodSandboxMetricsResponse{PodMetrics: out}, nil
}

// readMetricsOnly adds to a container's sample what only the metrics show:
// its processes' open files, its writable layer's filesystem and the CPU
// figures of its config. A figure that cannot be read is left out, with a
// debug line: the container's other metrics still count.
func (s *Server) readMetricsOnly(c *containerSample) {
	log := s.log.WithField("container", c.rec.ID)
	if ps, err := oci.ReadProcessStats(c.rec.CgroupsPath, oci.CgroupDriver(s.cfg.CgroupDriver)); err == nil {
		c.procs = &ps
	} else {
		log.WithError(err).Debug("no process figures for the container's metrics")
	}
	mountpoint := c.stats.GetWritableLayer().GetFsId().GetMountpoint()
	facts, err := containerFactsCache.get(c.rec, mountpoint)
	if err != nil {
		log.WithError(err).Debug("no config or filesystem figures for the container's metrics")
		return
	}
	c.facts = facts
	if mountpoint == "" {
		return
	}
	if c.fs, err = facts.filesystem(mountpoint); err != nil {
		log.WithError(err).Debug("no filesystem figures for the container's metrics")
	}
}

func podMetrics(rec lifecycle.SandboxRecord, sample podSample) *runtime.PodSandboxMetrics {
	pm := &runtime.PodSandboxMetrics{PodSandboxId: rec.ID}
	pod := &metricSink{at: sample.at, base: []string{"", rec.ID, "", "", rec.Metadata.Namespace, rec.Metadata.Name}}
	pod.seen(rec.CreatedAt)
	if sample.cgroup != nil {
		pod.cgroup(sample.cgroup)
		pod.add(mProcesses, sample.cgroup.Processes)
	}
	pod.network(sample.net)
	pm.Metrics = pod.out
	for _, c := range sample.containers {
		m := &metricSink{at: sample.at, base: []string{c.rec.Metadata.Name, c.rec.ID, c.rec.Image, c.rec.Metadata.Name, rec.Metadata.Namespace, rec.Metadata.Name}}
		m.seen(c.rec.StartedAt)
		m.cgroup(c.cgroup)
		m.container(c)
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

// seen adds when the container (or pod) started and when it was last seen:
// now, as cAdvisor's scrape time.
func (m *metricSink) seen(startedAt int64) {
	m.add(mStartTime, uint64(startedAt)/nsPerSec)
	m.add(mLastSeen, uint64(m.at)/nsPerSec)
}

// container adds the figures of a container beyond its cgroup's.
func (m *metricSink) container(c containerSample) {
	// cgroup.procs, when read: the kernel's pids.current counts threads.
	if c.procs != nil {
		m.add(mProcesses, c.procs.Processes)
		m.add(mFileDescriptors, c.procs.FileDescriptors)
		m.add(mSockets, c.procs.Sockets)
	} else {
		m.add(mProcesses, c.cgroup.Processes)
	}
	if c.facts.cpuPeriod != 0 {
		m.add(mCPUPeriod, c.facts.cpuPeriod)
		m.add(mCPUShares, c.facts.cpuShares)
	}
	w := c.stats.GetWritableLayer()
	if w == nil {
		return
	}
	device := ""
	if c.fs != nil {
		device = c.fs.device
		m.add(mFsLimit, c.fs.limit, device)
		m.add(mFsInodesTotal, c.fs.inodes, device)
		m.add(mFsInodesFree, c.fs.inodesFree, device)
	}
	m.add(mFsUsage, w.GetUsedBytes().GetValue(), device)
}

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
	m.add(mSwapLimit, cg.Memory.MemSwapLimit)
	m.add(mMemMaxUsage, cg.Memory.MaxUsage)
	m.add(mMemFailcnt, cg.Memory.Failcnt)
	m.add(mMemKernel, cg.Memory.Kernel)
	m.add(mMemMapped, cg.Memory.MappedFile)
	m.add(mOOMEvents, cg.Memory.OOMKills)
	m.add(mThreads, cg.Processes)
	m.add(mThreadsMax, cg.ProcessesLimit)
	for _, d := range cg.IO {
		m.add(mFsReadBytes, d.ReadBytes, d.Device)
		m.add(mFsWriteBytes, d.WriteBytes, d.Device)
		m.add(mFsReads, d.Reads, d.Device)
		m.add(mFsWrites, d.Writes, d.Device)
		major, minor := strconv.FormatUint(d.Major, 10), strconv.FormatUint(d.Minor, 10)
		m.add(mBlkioUsage, d.ReadBytes, d.Device, major, minor, "Read")
		m.add(mBlkioUsage, d.WriteBytes, d.Device, major, minor, "Write")
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
