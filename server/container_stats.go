package server

import (
	"context"
	"fmt"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// ContainerStats reports a container's CPU (cumulative and as a rate),
// memory, swap, IO pressure and writable-layer usage, read from its cgroup
// and its rootfs. The kubelet's CRI stats provider calls the List form
// every few seconds for the summary API and eviction.
func (s *Server) ContainerStats(ctx context.Context, req *runtime.ContainerStatsRequest) (*runtime.ContainerStatsResponse, error) {
	st, err := statsOf(req.GetContainerId(), s.lookupContainer, s.containerStats)
	if err != nil {
		return nil, toStatus(err)
	}
	return &runtime.ContainerStatsResponse{Stats: st}, nil
}

// ListContainerStats reports the stats of the containers that match the
// filter. Containers that are not running have no cgroup figures and are
// left out, as containerd does.
func (s *Server) ListContainerStats(ctx context.Context, req *runtime.ListContainerStatsRequest) (*runtime.ListContainerStatsResponse, error) {
	stats, err := statsList(req.GetFilter(), s.containers.List(), containerStatsListed, s.containerStats)
	if err != nil {
		return nil, toStatus(err)
	}
	return &runtime.ListContainerStatsResponse{Stats: stats}, nil
}

// containerStats is the CRI part of containerStatsAndCgroup.
func (s *Server) containerStats(rec lifecycle.ContainerRecord) (*runtime.ContainerStats, error) {
	st, _, err := s.containerStatsAndCgroup(rec)
	if err != nil {
		return nil, fmt.Errorf("stats of container %s: %w", rec.ID, err)
	}
	return st, nil
}

// containerStatsAndCgroup also returns the cgroup figures the CRI message
// has no room for (the metrics use them); nil for a container not running.
func (s *Server) containerStatsAndCgroup(rec lifecycle.ContainerRecord) (*runtime.ContainerStats, *oci.CgroupStats, error) {
	now := time.Now().UnixNano()
	st := &runtime.ContainerStats{
		Attributes: &runtime.ContainerAttributes{
			Id:          rec.ID,
			Metadata:    &runtime.ContainerMetadata{Name: rec.Metadata.Name, Attempt: rec.Metadata.Attempt},
			Labels:      rec.Labels,
			Annotations: rec.Annotations,
		},
	}
	var cg *oci.CgroupStats
	if rec.State == lifecycle.StateRunning {
		read, err := oci.ReadCgroupStats(rec.CgroupsPath, oci.CgroupDriver(s.cfg.CgroupDriver))
		if err != nil {
			return nil, nil, err
		}
		cg = &read
		u := cgroupUsage(s.ctr(rec.ID).nanoCores, now, read)
		st.Cpu, st.Memory, st.Swap, st.Io = u.cpu, u.memory, u.swap, u.io
	}
	if u, err := s.usage.RootfsUsage(rec.ID); err == nil {
		st.WritableLayer = &runtime.FilesystemUsage{
			Timestamp:  now,
			FsId:       &runtime.FilesystemIdentifier{Mountpoint: u.Mountpoint},
			UsedBytes:  &runtime.UInt64Value{Value: u.UsedBytes},
			InodesUsed: &runtime.UInt64Value{Value: u.InodesUsed},
		}
	}
	return st, cg, nil
}

// criUsage are the CRI messages made of one cgroup's figures.
type criUsage struct {
	cpu    *runtime.CpuUsage
	memory *runtime.MemoryUsage
	swap   *runtime.SwapUsage // nil: the host does not account swap
	io     *runtime.IoUsage   // nil: the kernel keeps no IO pressure here
}

// cgroupUsage turns a cgroup's figures into the CRI's, with the kubelet's
// definitions: available = limit - working set (unset without a limit),
// swap available = swap limit - swap usage, PSI totals in nanoseconds.
// rate takes the CPU sample and returns usage_nano_cores (cpuSample.next).
func cgroupUsage(rate func(at int64, usage uint64) (uint64, bool), now int64, cg oci.CgroupStats) criUsage {
	u := criUsage{
		cpu: &runtime.CpuUsage{
			Timestamp:            now,
			UsageCoreNanoSeconds: &runtime.UInt64Value{Value: cg.CPU.UsageNanos},
			Psi:                  psiStats(cg.CPUPressure),
		},
		memory: &runtime.MemoryUsage{
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
		u.cpu.UsageNanoCores = &runtime.UInt64Value{Value: nanoCores}
	}
	if cg.Memory.Limit != 0 {
		u.memory.AvailableBytes = &runtime.UInt64Value{Value: subOrZero(cg.Memory.Limit, cg.Memory.WorkingSet)}
	}
	if cg.Swap != nil {
		u.swap = &runtime.SwapUsage{Timestamp: now, SwapUsageBytes: &runtime.UInt64Value{Value: cg.Swap.Usage}}
		if cg.Swap.Limit != 0 {
			u.swap.SwapAvailableBytes = &runtime.UInt64Value{Value: subOrZero(cg.Swap.Limit, cg.Swap.Usage)}
		}
	}
	if cg.IOPressure != nil {
		u.io = &runtime.IoUsage{Timestamp: now, Psi: psiStats(cg.IOPressure)}
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
