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

// PodSandboxStats reports a pod's usage: the sum of its running containers'
// CPU and memory, with each container's own stats beside it.
func (s *Server) PodSandboxStats(ctx context.Context, req *runtime.PodSandboxStatsRequest) (*runtime.PodSandboxStatsResponse, error) {
	rec, err := s.lookupSandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, toStatus(err)
	}
	st, err := s.sandboxStats(rec)
	if err != nil {
		return nil, toStatus(fmt.Errorf("stats of pod sandbox %s: %w", rec.ID, err))
	}
	return &runtime.PodSandboxStatsResponse{Stats: st}, nil
}

// ListPodSandboxStats reports the stats of the ready sandboxes that match the filter.
func (s *Server) ListPodSandboxStats(ctx context.Context, req *runtime.ListPodSandboxStatsRequest) (*runtime.ListPodSandboxStatsResponse, error) {
	f := req.GetFilter()
	var out []*runtime.PodSandboxStats
	for _, rec := range s.sandboxes.List() {
		if rec.State != stateReady ||
			f.GetId() != "" && !strings.HasPrefix(rec.ID, f.GetId()) ||
			!labelsMatch(rec.Labels, f.GetLabelSelector()) {
			continue
		}
		st, err := s.sandboxStats(rec)
		if err != nil {
			return nil, toStatus(fmt.Errorf("stats of pod sandbox %s: %w", rec.ID, err))
		}
		out = append(out, st)
	}
	return &runtime.ListPodSandboxStatsResponse{Stats: out}, nil
}

func (s *Server) sandboxStats(rec sandboxRecord) (*runtime.PodSandboxStats, error) {
	now := time.Now().UnixNano()
	m := rec.Metadata
	linux := &runtime.LinuxPodSandboxStats{
		Cpu:    &runtime.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: &runtime.UInt64Value{}},
		Memory: &runtime.MemoryUsage{Timestamp: now, WorkingSetBytes: &runtime.UInt64Value{}, UsageBytes: &runtime.UInt64Value{}, RssBytes: &runtime.UInt64Value{}},
	}
	for _, c := range s.containersOf(rec.ID) {
		if c.State != stateRunning {
			continue
		}
		cs, err := s.containerStats(c)
		if errors.Is(err, oci.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		linux.Containers = append(linux.Containers, cs)
		linux.Cpu.UsageCoreNanoSeconds.Value += cs.GetCpu().GetUsageCoreNanoSeconds().GetValue()
		linux.Memory.WorkingSetBytes.Value += cs.GetMemory().GetWorkingSetBytes().GetValue()
		linux.Memory.UsageBytes.Value += cs.GetMemory().GetUsageBytes().GetValue()
		linux.Memory.RssBytes.Value += cs.GetMemory().GetRssBytes().GetValue()
	}
	return &runtime.PodSandboxStats{
		Attributes: &runtime.PodSandboxAttributes{
			Id:          rec.ID,
			Metadata:    &runtime.PodSandboxMetadata{Name: m.Name, Namespace: m.Namespace, Uid: m.UID, Attempt: m.Attempt},
			Labels:      rec.Labels,
			Annotations: rec.Annotations,
		},
		Linux: linux,
	}, nil
}
