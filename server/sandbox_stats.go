package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/stats"
)

// PodSandboxStats reports a pod's usage, read from the pod's own cgroup (its
// cgroup parent) so that it never goes backwards when a container exits,
// its network counters and process count, with each running container's
// own stats beside it.
func (s *Server) PodSandboxStats(ctx context.Context, req *runtime.PodSandboxStatsRequest) (*runtime.PodSandboxStatsResponse, error) {
	st, err := statsOf(req.GetPodSandboxId(), s.lookupSandbox, s.sandboxStats)
	if err != nil {
		return nil, toStatus(err)
	}
	return &runtime.PodSandboxStatsResponse{Stats: st}, nil
}

// sandboxStats is the CRI part of a pod's sample.
func (s *Server) sandboxStats(rec lifecycle.SandboxRecord) (*runtime.PodSandboxStats, error) {
	sample, err := s.sandboxSample(rec)
	if err != nil {
		return nil, fmt.Errorf("stats of pod sandbox %s: %w", rec.ID, err)
	}
	return sample.Stats, nil
}

// ListPodSandboxStats reports the stats of the ready sandboxes that match the filter.
func (s *Server) ListPodSandboxStats(ctx context.Context, req *runtime.ListPodSandboxStatsRequest) (*runtime.ListPodSandboxStatsResponse, error) {
	stats, err := statsList(req.GetFilter(), s.sandboxes.List(), sandboxStatsListed, s.sandboxStats)
	if err != nil {
		return nil, toStatus(err)
	}
	return &runtime.ListPodSandboxStatsResponse{Stats: stats}, nil
}

func (s *Server) sandboxSample(rec lifecycle.SandboxRecord) (stats.PodSample, error) {
	now := time.Now().UnixNano()
	m := rec.Metadata
	sample := stats.PodSample{At: now}
	linux := &runtime.LinuxPodSandboxStats{}
	for _, c := range s.containersOf(rec.ID) {
		if c.State != lifecycle.StateRunning {
			continue
		}
		cs, cg, err := s.containerStatsAndCgroup(c)
		if errors.Is(err, oci.ErrNotFound) {
			continue // exited since the list was taken
		}
		if err != nil {
			return sample, err
		}
		linux.Containers = append(linux.Containers, cs)
		sample.Containers = append(sample.Containers, stats.ContainerSample{Rec: c, Stats: cs, Cgroup: cg})
	}
	cfg, err := rec.DecodeConfig()
	if err != nil {
		return sample, err
	}
	pod, err := oci.ReadPodCgroupStats(cfg.GetLinux().GetCgroupParent(), oci.CgroupDriver(s.cfg.CgroupDriver))
	switch {
	case err == nil:
		sample.Cgroup = &pod
	case errors.Is(err, oci.ErrNotFound):
		pod = s.summedPodCgroup(rec, sample.Containers)
	default:
		return sample, err
	}
	u := stats.CgroupUsage(s.pod(rec.ID).nanoCores, now, pod)
	linux.Cpu, linux.Memory, linux.Io = u.CPU, u.Memory, u.IO
	linux.Process = &runtime.ProcessUsage{Timestamp: now, ProcessCount: &runtime.UInt64Value{Value: pod.Processes}}
	if ns := rec.Namespaces.Net; ns != "" && rec.NetworkUp {
		// A pod on the host network has no counters of its own (as with
		// containerd): the node's are the kubelet's to report.
		ifs, err := network.ReadInterfaceCounters(ns)
		if err != nil {
			s.log.WithError(err).WithField("pod", rec.ID).Debug("no network counters for the pod's stats")
		} else {
			sample.Net = ifs
			linux.Network = stats.NetworkUsage(now, ifs)
		}
	}
	sample.Stats = &runtime.PodSandboxStats{
		Attributes: &runtime.PodSandboxAttributes{
			Id:          rec.ID,
			Metadata:    &runtime.PodSandboxMetadata{Name: m.Name, Namespace: m.Namespace, Uid: m.UID, Attempt: m.Attempt},
			Labels:      rec.Labels,
			Annotations: rec.Annotations,
		},
		Linux: linux,
	}
	return sample, nil
}

// summedPodCgroup stands in for the cgroup of a pod that has none (no
// cgroup parent, as crictl and CI tools often send; the kubelet always gives
// one) or none yet (no container created): the CPU, memory and process
// figures of its running containers, summed. CPU adds the last figure seen
// of each container that is no longer running, so that the pod's does not
// drop when one exits; it drops only when one is removed.
func (s *Server) summedPodCgroup(rec lifecycle.SandboxRecord, running []stats.ContainerSample) oci.CgroupStats {
	var sum oci.CgroupStats
	seen := map[string]bool{}
	for _, c := range running {
		seen[c.Rec.ID] = true
		sum.CPU.UsageNanos += c.Cgroup.CPU.UsageNanos
		sum.Memory.WorkingSet += c.Cgroup.Memory.WorkingSet
		sum.Memory.Usage += c.Cgroup.Memory.Usage
		sum.Memory.RSS += c.Cgroup.Memory.RSS
		sum.Memory.PageFaults += c.Cgroup.Memory.PageFaults
		sum.Memory.MajorPageFaults += c.Cgroup.Memory.MajorPageFaults
		sum.Processes += c.Cgroup.Processes
	}
	for _, c := range s.containersOf(rec.ID) {
		if !seen[c.ID] {
			last, _ := s.ctr(c.ID).lastUsage()
			sum.CPU.UsageNanos += last
		}
	}
	return sum
}
