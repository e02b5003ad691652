package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/oci"
)

// ContainerStats reports a container's CPU, memory and writable-layer usage,
// read from its cgroup and its rootfs. The kubelet's CRI stats provider
// calls the List form every few seconds for the summary API and eviction.
func (s *Server) ContainerStats(ctx context.Context, req *runtime.ContainerStatsRequest) (*runtime.ContainerStatsResponse, error) {
	rec, err := s.lookupContainer(req.GetContainerId())
	if err != nil {
		return nil, toStatus(err)
	}
	st, err := s.containerStats(rec)
	if err != nil {
		return nil, toStatus(fmt.Errorf("stats of container %s: %w", rec.ID, err))
	}
	return &runtime.ContainerStatsResponse{Stats: st}, nil
}

// ListContainerStats reports the stats of the containers that match the
// filter. Containers that are not running have no cgroup figures and are left out.
func (s *Server) ListContainerStats(ctx context.Context, req *runtime.ListContainerStatsRequest) (*runtime.ListContainerStatsResponse, error) {
	f := req.GetFilter()
	var out []*runtime.ContainerStats
	for _, rec := range s.containers.List() {
		if rec.State != stateRunning ||
			f.GetId() != "" && !strings.HasPrefix(rec.ID, f.GetId()) ||
			f.GetPodSandboxId() != "" && !strings.HasPrefix(rec.SandboxID, f.GetPodSandboxId()) ||
			!labelsMatch(rec.Labels, f.GetLabelSelector()) {
			continue
		}
		st, err := s.containerStats(rec)
		if errors.Is(err, oci.ErrNotFound) {
			continue // exited since the list was taken
		}
		if err != nil {
			return nil, toStatus(fmt.Errorf("stats of container %s: %w", rec.ID, err))
		}
		out = append(out, st)
	}
	return &runtime.ListContainerStatsResponse{Stats: out}, nil
}

func (s *Server) containerStats(rec containerRecord) (*runtime.ContainerStats, error) {
	now := time.Now().UnixNano()
	st := &runtime.ContainerStats{
		Attributes: &runtime.ContainerAttributes{
			Id:          rec.ID,
			Metadata:    &runtime.ContainerMetadata{Name: rec.Metadata.Name, Attempt: rec.Metadata.Attempt},
			Labels:      rec.Labels,
			Annotations: rec.Annotations,
		},
	}
	if rec.State == stateRunning {
		cg, err := oci.ReadCgroupStats(rec.CgroupsPath, oci.CgroupDriver(s.cfg.CgroupDriver))
		if err != nil {
			return nil, err
		}
		st.Cpu = &runtime.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: &runtime.UInt64Value{Value: cg.CPU.UsageNanos}}
		st.Memory = &runtime.MemoryUsage{
			Timestamp:       now,
			WorkingSetBytes: &runtime.UInt64Value{Value: cg.Memory.WorkingSet},
			UsageBytes:      &runtime.UInt64Value{Value: cg.Memory.Usage},
			RssBytes:        &runtime.UInt64Value{Value: cg.Memory.RSS},
			PageFaults:      &runtime.UInt64Value{Value: cg.Memory.PageFaults},
			MajorPageFaults: &runtime.UInt64Value{Value: cg.Memory.MajorPageFaults},
		}
	}
	if u, err := s.images.RootfsUsage(rec.ID); err == nil {
		st.WritableLayer = &runtime.FilesystemUsage{
			Timestamp:  now,
			FsId:       &runtime.FilesystemIdentifier{Mountpoint: u.Mountpoint},
			UsedBytes:  &runtime.UInt64Value{Value: u.UsedBytes},
			InodesUsed: &runtime.UInt64Value{Value: u.InodesUsed},
		}
	}
	return st, nil
}
