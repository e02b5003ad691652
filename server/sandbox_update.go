package server

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/validate"
)

// UpdatePodSandboxResources is the kubelet's word, before each change of a
// pod's cgroup in an in-place resize, of the pod's new overhead and
// resources. The kubelet writes the pod's cgroup itself: minicri keeps them
// with the sandbox's config, so that they survive a restart and NRI plugins
// see them, and hands them to the plugins, which may refuse them.
func (s *Server) UpdatePodSandboxResources(ctx context.Context, req *runtime.UpdatePodSandboxResourcesRequest) (*runtime.UpdatePodSandboxResourcesResponse, error) {
	if err := validate.Resources("overhead", req.GetOverhead()); err != nil {
		return nil, toStatus(err)
	}
	if err := validate.Resources("resources", req.GetResources()); err != nil {
		return nil, toStatus(err)
	}
	id, err := s.resolveSandbox("pod_sandbox_id", req.GetPodSandboxId())
	if err != nil {
		return nil, toStatus(err)
	}
	_, unlock := s.lockPod(id)
	defer unlock()
	rec, err := s.sandboxes.Get(id)
	if err != nil {
		return nil, toStatus(err)
	}
	if rec.State != lifecycle.StateReady {
		return nil, toStatus(sandboxNotReady(rec))
	}
	if err := s.nriUpdatePodSandbox(ctx, rec, req.GetOverhead(), req.GetResources()); err != nil {
		return nil, toStatus(fmt.Errorf("update resources of pod sandbox %s: %w", id, err))
	}
	if rec, err = s.recordPodResources(rec, req.GetOverhead(), req.GetResources()); err != nil {
		return nil, toStatus(fmt.Errorf("update resources of pod sandbox %s: %w", id, err))
	}
	s.nriPostUpdatePodSandbox(ctx, rec)
	return &runtime.UpdatePodSandboxResourcesResponse{}, nil
}

// recordPodResources writes the pod's overhead and resources into its
// config, where RunPodSandbox's came; a nil one keeps what was there.
func (s *Server) recordPodResources(rec lifecycle.SandboxRecord, overhead, resources *runtime.LinuxContainerResources) (lifecycle.SandboxRecord, error) {
	cfg, err := rec.DecodeConfig()
	if err != nil {
		return rec, err
	}
	if cfg.Linux == nil {
		cfg.Linux = &runtime.LinuxPodSandboxConfig{}
	}
	if overhead != nil {
		cfg.Linux.Overhead = overhead
	}
	if resources != nil {
		cfg.Linux.Resources = resources
	}
	raw, err := proto.Marshal(cfg)
	if err != nil {
		return rec, fmt.Errorf("encode config: %w", err)
	}
	return s.sandboxes.Update(rec.ID, func(r *lifecycle.SandboxRecord) error { r.Config = raw; return nil })
}
