package stats

import (
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Descriptors describes the metrics PodMetrics reports, with cAdvisor's
// names, help texts and label keys.
func Descriptors() []*runtime.MetricDescriptor {
	out := make([]*runtime.MetricDescriptor, 0, len(metricDefs))
	for _, d := range metricDefs {
		out = append(out, &runtime.MetricDescriptor{Name: d.name, Help: d.help, LabelKeys: d.labelKeys()})
	}
	return out
}

// baseLabelKeys label every metric, as the kubelet's cAdvisor labels them:
// the container's name, the CRI ID (of the pod for pod-wide figures), the
// image, the name again (cAdvisor's runtime name), the pod's namespace and
// name. Pod-wide figures (the pod's cgroup, its network) have an empty
// container, name and image, as cAdvisor's pod cgroup has.
var baseLabelKeys = []string{"container", "id", "image", "name", "namespace", "pod"}

// metricDef is one metric: its name, help, type and the label keys it has
// beyond the base ones.
type metricDef struct {
	name, help string
	typ        runtime.MetricType
	extra      []string
}

func (d *metricDef) labelKeys() []string {
	return append(append([]string(nil), baseLabelKeys...), d.extra...)
}

func counter(name, help string, extra ...string) *metricDef {
	return &metricDef{name: name, help: help, typ: runtime.MetricType_COUNTER, extra: extra}
}

func gauge(name, help string, extra ...string) *metricDef {
	return &metricDef{name: name, help: help, typ: runtime.MetricType_GAUGE, extra: extra}
}

// The CRI carries metric values as integers: seconds are whole seconds, as
// with cri-o.
var (
	mCPUUsage         = counter("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", "cpu")
	mCPUUser          = counter("container_cpu_user_seconds_total", "Cumulative user cpu time consumed in seconds.")
	mCPUSystem        = counter("container_cpu_system_seconds_total", "Cumulative system cpu time consumed in seconds.")
	mCFSPeriods       = counter("container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.")
	mCFSThrottled     = counter("container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.")
	mCFSThrottledSecs = counter("container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.")
	mMemUsage         = gauge("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed")
	mMemWorkingSet    = gauge("container_memory_working_set_bytes", "Current working set in bytes.")
	mMemRSS           = gauge("container_memory_rss", "Size of RSS in bytes.")
	mMemCache         = gauge("container_memory_cache", "Number of bytes of page cache memory.")
	mMemSwap          = gauge("container_memory_swap", "Container swap usage in bytes.")
	mMemFailures      = counter("container_memory_failures_total", "Cumulative count of memory allocation failures.", "failure_type", "scope")
	mMemLimit         = gauge("container_spec_memory_limit_bytes", "Memory limit for the container.")
	mMemMaxUsage      = gauge("container_memory_max_usage_bytes", "Maximum memory usage recorded in bytes")
	mMemFailcnt       = counter("container_memory_failcnt", "Number of memory usage hits limits")
	mMemKernel        = gauge("container_memory_kernel_usage", "Size of kernel memory allocated in bytes.")
	mMemMapped        = gauge("container_memory_mapped_file", "Size of memory mapped files in bytes.")
	mOOMEvents        = counter("container_oom_events_total", "Count of out of memory events observed for the container")
	mSwapLimit        = gauge("container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.")
	mCPUPeriod        = gauge("container_spec_cpu_period", "CPU period of the container.")
	mCPUShares        = gauge("container_spec_cpu_shares", "CPU share of the container.")
	mProcesses        = gauge("container_processes", "Number of processes running inside the container.")
	mThreads          = gauge("container_threads", "Number of threads running inside the container")
	mThreadsMax       = gauge("container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero")
	mFileDescriptors  = gauge("container_file_descriptors", "Number of open file descriptors for the container.")
	mSockets          = gauge("container_sockets", "Number of open sockets for the container.")
	mStartTime        = gauge("container_start_time_seconds", "Start time of the container since unix epoch in seconds.")
	mLastSeen         = gauge("container_last_seen", "Last time a container was seen by the exporter")
	mFsUsage          = gauge("container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", "device")
	mFsLimit          = gauge("container_fs_limit_bytes", "Number of bytes that can be consumed by the container on this filesystem.", "device")
	mFsInodesTotal    = gauge("container_fs_inodes_total", "Number of Inodes", "device")
	mFsInodesFree     = gauge("container_fs_inodes_free", "Number of available Inodes", "device")
	mBlkioUsage       = counter("container_blkio_device_usage_total", "Blkio Device bytes usage", "device", "major", "minor", "operation")
	mFsReadBytes      = counter("container_fs_reads_bytes_total", "Cumulative count of bytes read", "device")
	mFsWriteBytes     = counter("container_fs_writes_bytes_total", "Cumulative count of bytes written", "device")
	mFsReads          = counter("container_fs_reads_total", "Cumulative count of reads completed", "device")
	mFsWrites         = counter("container_fs_writes_total", "Cumulative count of writes completed", "device")
	mCPUPressure      = pressureOf("cpu", "CPU")
	mMemPressure      = pressureOf("memory", "memory")
	mIOPressure       = pressureOf("io", "IO")
	mNetRx            = trafficOf("receive", "received", "receiving")
	mNetTx            = trafficOf("transmit", "transmitted", "transmitting")
)

// pressureDefs are the two stall figures of one resource's pressure (PSI).
type pressureDefs struct{ waiting, stalled *metricDef }

func pressureOf(resource, shown string) pressureDefs {
	prefix, cause := "container_pressure_"+resource, " due to "+shown+" congestion."
	return pressureDefs{
		waiting: counter(prefix+"_waiting_seconds_total", "Total time duration tasks in the container have waited"+cause),
		stalled: counter(prefix+"_stalled_seconds_total", "Total time duration no tasks in the container could make progress"+cause),
	}
}

// trafficDefs are the counters of one direction of a network interface.
type trafficDefs struct{ bytes, packets, dropped, errors *metricDef }

func trafficOf(direction, done, doing string) trafficDefs {
	prefix := "container_network_" + direction
	return trafficDefs{
		bytes:   counter(prefix+"_bytes_total", "Cumulative count of bytes "+done, "interface"),
		packets: counter(prefix+"_packets_total", "Cumulative count of packets "+done, "interface"),
		dropped: counter(prefix+"_packets_dropped_total", "Cumulative count of packets dropped while "+doing, "interface"),
		errors:  counter(prefix+"_errors_total", "Cumulative count of errors encountered while "+doing, "interface"),
	}
}

var metricDefs = []*metricDef{
	mCPUUsage, mCPUUser, mCPUSystem, mCFSPeriods, mCFSThrottled, mCFSThrottledSecs,
	mMemUsage, mMemWorkingSet, mMemRSS, mMemCache, mMemSwap, mMemFailures, mMemLimit,
	mMemMaxUsage, mMemFailcnt, mMemKernel, mMemMapped, mOOMEvents,
	mSwapLimit, mCPUPeriod, mCPUShares,
	mProcesses, mThreads, mThreadsMax, mFileDescriptors, mSockets, mStartTime, mLastSeen,
	mFsUsage, mFsLimit, mFsInodesTotal, mFsInodesFree,
	mFsReadBytes, mFsWriteBytes, mFsReads, mFsWrites, mBlkioUsage,
	mCPUPressure.waiting, mCPUPressure.stalled, mMemPressure.waiting, mMemPressure.stalled,
	mIOPressure.waiting, mIOPressure.stalled,
	mNetRx.bytes, mNetRx.packets, mNetRx.dropped, mNetRx.errors,
	mNetTx.bytes, mNetTx.packets, mNetTx.dropped, mNetTx.errors,
}
