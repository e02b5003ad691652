// Package stats turns what minicri reads of a container or a pod (its
// cgroup's figures, its network counters, its writable layer) into the
// CRI's stats and the cAdvisor-shaped metrics of ListPodSandboxMetrics. It
// reads cgroups and records and writes nothing; the handlers that find
// the records are in server.
package stats

import (
	"slices"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// PodSample is one reading of a pod: its CRI stats, and the figures the
// metrics need beyond them.
type PodSample struct {
	Stats      *runtime.PodSandboxStats
	Cgroup     *oci.CgroupStats // nil: the pod has no cgroup of its own
	Containers []ContainerSample
	Net        []network.InterfaceCounters
	At         int64
}

// ContainerSample is one reading of a running container. The metrics add
// Procs, Facts and FS (ReadMetricsOnly); the stats have no use for them.
type ContainerSample struct {
	Rec    lifecycle.ContainerRecord
	Stats  *runtime.ContainerStats
	Cgroup *oci.CgroupStats
	Procs  *oci.ProcessStats // nil: not read
	Facts  containerFacts
	FS     *fsFigures // nil: not read
}

// Usage are the CRI messages made of one cgroup's figures.
type Usage struct {
	CPU    *runtime.CpuUsage
	Memory *runtime.MemoryUsage
	Swap   *runtime.SwapUsage // nil: the host does not account swap
	IO     *runtime.IoUsage   // nil: the kernel keeps no IO pressure here
}

// CgroupUsage turns a cgroup's figures into the CRI's, with the kubelet's
// definitions: available = limit - working set (unset without a limit),
// swap available = swap limit - swap usage, PSI totals in nanoseconds.
// rate takes the CPU sample and returns usage_nano_cores (CPUSample.Next).
func CgroupUsage(rate func(at int64, usage uint64) (uint64, bool), now int64, cg oci.CgroupStats) Usage {
	u := Usage{
		CPU: &runtime.CpuUsage{
			Timestamp:            now,
			UsageCoreNanoSeconds: &runtime.UInt64Value{Value: cg.CPU.UsageNanos},
			Psi:                  psiStats(cg.CPUPressure),
		},
		Memory: &runtime.MemoryUsage{
			Timestamp:       now,
			WorkingSetBytes: &runtime.UInt64Value{Value: cg.Memory.WorkingSet},
			UsageBytes:      &runtime.UInt64Value{Value: cg.Memory.Usage},
			RssBytes:        &runtime.UInt64Value{Value: cg.Memory.RSS},
			PageFaults:      &runtime.UInt64Value{Value: cg.Memory.PageFaults},
			MajorPageFaults: &runtime.UInt64Value{Value: cg.Memory.MajorPageFaults},
			Psi:             psiStats(cg.MemoryPressure),
		},
	}
	if nanoCores, ok := rate(now, cg.CPU.UsageNanos); ok {
		u.CPU.UsageNanoCores = &runtime.UInt64Value{Value: nanoCores}
	}
	if cg.Memory.Limit != 0 {
		u.Memory.AvailableBytes = &runtime.UInt64Value{Value: subOrZero(cg.Memory.Limit, cg.Memory.WorkingSet)}
	}
	if cg.Swap != nil {
		u.Swap = &runtime.SwapUsage{Timestamp: now, SwapUsageBytes: &runtime.UInt64Value{Value: cg.Swap.Usage}}
		if cg.Swap.Limit != 0 {
			u.Swap.SwapAvailableBytes = &runtime.UInt64Value{Value: subOrZero(cg.Swap.Limit, cg.Swap.Usage)}
		}
	}
	if cg.IOPressure != nil {
		u.IO = &runtime.IoUsage{Timestamp: now, Psi: psiStats(cg.IOPressure)}
	}
	return u
}

func psiStats(p *oci.Pressure) *runtime.PsiStats {
	if p == nil {
		return nil
	}
	conv := func(d oci.PressureData) *runtime.PsiData {
		return &runtime.PsiData{Total: d.Total * 1000, Avg10: d.Avg10, Avg60: d.Avg60, Avg300: d.Avg300}
	}
	return &runtime.PsiStats{Some: conv(p.Some), Full: conv(p.Full)}
}

func subOrZero(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// NetworkUsage reports every interface of the pod; the default one is the
// interface CNI set up (eth0), as the kubelet looks for it by that name.
// Without eth0 (a StopPodSandbox is tearing the network down, or a CNI
// plugin named it otherwise) it reports nothing: the kubelet reads the
// default interface of any network usage it is given, and a nil one
// crashed it (its stats summary dereferences it).
func NetworkUsage(now int64, ifs []network.InterfaceCounters) *runtime.NetworkUsage {
	if !slices.ContainsFunc(ifs, func(i network.InterfaceCounters) bool { return i.Name == network.PodInterface }) {
		return nil
	}
	n := &runtime.NetworkUsage{Timestamp: now}
	for _, i := range ifs {
		u := &runtime.NetworkInterfaceUsage{
			Name:     i.Name,
			RxBytes:  &runtime.UInt64Value{Value: i.RxBytes},
			RxErrors: &runtime.UInt64Value{Value: i.RxErrors},
			TxBytes:  &runtime.UInt64Value{Value: i.TxBytes},
			TxErrors: &runtime.UInt64Value{Value: i.TxErrors},
		}
		n.Interfaces = append(n.Interfaces, u)
		if i.Name == network.PodInterface {
			n.DefaultInterface = u
		}
	}
	return n
}
