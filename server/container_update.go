package server

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/validate"
)

// resourceUpdater changes a container's cgroup limits (*oci.Runtime).
type resourceUpdater interface {
	Update(ctx context.Context, id string, res *specs.LinuxResources) error
}

// UpdateContainerResources changes a running or created container's cgroup
// limits, and records them so that ContainerStatus reports what applies.
func (s *Server) UpdateContainerResources(ctx context.Context, req *runtime.UpdateContainerResourcesRequest) (*runtime.UpdateContainerResourcesResponse, error) {
	resources := req.GetLinux()
	if err := validate.Resources("linux", resources); err != nil {
		return nil, toStatus(err)
	}
	rec, unlock, err := s.lockContainer(req.GetContainerId())
	if err != nil {
		return nil, toStatus(err)
	}
	defer unlock()
	id := rec.ID
	if rec.State != lifecycle.StateCreated && rec.State != lifecycle.StateRunning {
		return nil, toStatus(markf(errWrongState, "container %s is %s: only a created or running container can be updated", id, rec.State))
	}
	if resources == nil {
		return &runtime.UpdateContainerResourcesResponse{}, nil
	}
	resources, err = s.nriUpdateContainer(ctx, rec, resources, req.GetAnnotations())
	if err != nil {
		return nil, toStatus(fmt.Errorf("update resources of container %s: %w", id, err))
	}
	if err := s.updateResources(ctx, rec, resources); err != nil {
		return nil, toStatus(fmt.Errorf("update resources of container %s: %w", id, err))
	}
	s.nriPostUpdateContainer(ctx, id)
	return &runtime.UpdateContainerResourcesResponse{}, nil
}

func (s *Server) updateResources(ctx context.Context, rec lifecycle.ContainerRecord, resources *runtime.LinuxContainerResources) error {
	wanted := ociResources(resources)
	s.warnMissingControllers(wanted)
	limits, err := oci.LinuxResources(wanted)
	if err != nil {
		return err
	}
	rt, err := s.runtimes.Get(rec.Handler)
	if err != nil {
		return err
	}
	if err := rt.Update(ctx, rec.ID, limits); err != nil {
		return err
	}
	cfg, err := rec.DecodeConfig()
	if err != nil {
		return err
	}
	if cfg.Linux == nil {
		cfg.Linux = &runtime.LinuxContainerConfig{}
	}
	cfg.Linux.Resources = resources
	raw, err := proto.Marshal(cfg)
	if err != nil {
		return err
	}
	_, err = s.containers.Update(rec.ID, func(r *lifecycle.ContainerRecord) error { r.Config = raw; return nil })
	return err
}

// warnMissingControllers logs, once per controller for the daemon's life,
// that limits were asked of a cgroup controller this host lacks and are
// skipped (oci.MissingControllers). The kubelet asks for them on every
// container, so a line each time would drown the log.
func (s *Server) warnMissingControllers(r *oci.Resources) {
	for _, c := range oci.MissingControllers(r) {
		if _, logged := s.missingControllers.LoadOrStore(c, true); !logged {
			s.log.WithField("controller", c).Warn("this host lacks the cgroup controller: its limits are skipped for every container")
		}
	}
}
