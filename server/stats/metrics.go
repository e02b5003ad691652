package stats

import (
	"strconv"
	"time"

	"github.com/sirupsen/logrus"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// ReadMetricsOnly adds to a container's sample what only the metrics show:
// its processes' open files, its writable layer's filesystem and the CPU
// figures of its config. A figure that cannot be read is left out, with a
// debug line: the container's other metrics still count.
func ReadMetricsOnly(c *ContainerSample, driver oci.CgroupDriver, log *logrus.Entry) {
	log = log.WithField("container", c.Rec.ID)
	if ps, err := oci.ReadProcessStats(c.Rec.CgroupsPath, driver); err == nil {
		c.Procs = &ps
	} else {
		log.WithError(err).Debug("no process figures for the container's metrics")
	}
	mountpoint := c.Stats.GetWritableLayer().GetFsId().GetMountpoint()
	facts, err := containerFactsCache.get(c.Rec, mountpoint)
	if err != nil {
		log.WithError(err).Debug("no config or filesystem figures for the container's metrics")
		return
	}
	c.Facts = facts
	if mountpoint == "" {
		return
	}
	if c.FS, err = facts.filesystem(mountpoint); err != nil {
		log.WithError(err).Debug("no filesystem figures for the container's metrics")
	}
}

// KeepFactsOf forgets the facts of the containers not in ids: removed ones.
func KeepFactsOf(ids map[string]bool) { containerFactsCache.keepOnly(ids) }

// PodMetrics are the metrics of a pod and its containers, from one sample.
func PodMetrics(rec lifecycle.SandboxRecord, sample PodSample) *runtime.PodSandboxMetrics {
	pm := &runtime.PodSandboxMetrics{PodSandboxId: rec.ID}
	pod := &metricSink{at: sample.At, base: []string{"", rec.ID, "", "", rec.Metadata.Namespace, rec.Metadata.Name}}
	pod.seen(rec.CreatedAt)
	if sample.Cgroup != nil {
		pod.cgroup(sample.Cgroup)
		pod.add(mProcesses, sample.Cgroup.Processes)
	}
	pod.network(sample.Net)
	pm.Metrics = pod.out
	for _, c := range sample.Containers {
		m := &metricSink{at: sample.At, base: []string{c.Rec.Metadata.Name, c.Rec.ID, c.Rec.Image, c.Rec.Metadata.Name, rec.Metadata.Namespace, rec.Metadata.Name}}
		m.seen(c.Rec.StartedAt)
		m.cgroup(c.Cgroup)
		m.container(c)
		pm.ContainerMetrics = append(pm.ContainerMetrics, &runtime.ContainerMetrics{ContainerId: c.Rec.ID, Metrics: m.out})
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
func (m *metricSink) container(c ContainerSample) {
	// cgroup.procs, when read: the kernel's pids.current counts threads.
	if c.Procs != nil {
		m.add(mProcesses, c.Procs.Processes)
		m.add(mFileDescriptors, c.Procs.FileDescriptors)
		m.add(mSockets, c.Procs.Sockets)
	} else {
		m.add(mProcesses, c.Cgroup.Processes)
	}
	if c.Facts.cpuPeriod != 0 {
		m.add(mCPUPeriod, c.Facts.cpuPeriod)
		m.add(mCPUShares, c.Facts.cpuShares)
	}
	w := c.Stats.GetWritableLayer()
	if w == nil {
		return
	}
	device := ""
	if c.FS != nil {
		device = c.FS.device
		m.add(mFsLimit, c.FS.limit, device)
		m.add(mFsInodesTotal, c.FS.inodes, device)
		m.add(mFsInodesFree, c.FS.inodesFree, device)
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
