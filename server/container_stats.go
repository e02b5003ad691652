package server

import (
	"context"
	"fmt"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/stats"
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
		u := stats.CgroupUsage(s.ctr(rec.ID).nanoCores, now, read)
		st.Cpu, st.Memory, st.Swap, st.Io = u.CPU, u.Memory, u.Swap, u.IO
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
