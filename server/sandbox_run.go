package server

import (
	"context"
	"errors"
	"fmt"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/podsandbox"
	"github.com/minicri/minicri/server/validate"
	"github.com/minicri/minicri/store"
)

// runtimeSet is the OCI runtimes by RuntimeClass handler (*oci.Handlers).
type runtimeSet interface {
	// Get returns the runtime of handler; "" is the default handler.
	Get(handler string) (ociRuntime, error)
	Names() []string
}

// ociRuntime is one OCI runtime (*oci.Runtime) in all the roles the
// handlers declare beside themselves; a function that needs only one takes
// only that one.
type ociRuntime interface {
	containerRuntime // container_stop.go
	resourceUpdater  // container_update.go
	processExecer    // container_exec.go
	runtimeProbe     // status.go
	monitorRuntime   // container_monitor.go
	containerCheckpointer
}

// RunPodSandbox makes a pod's shared namespaces, files and network
// (podsandbox.Controller.Run). The namespaces are pinned as files, so no
// pause image is needed; only a pod that shares its PID namespace gets an
// infra process (minicri-pause), to be that namespace's init.
func (s *Server) RunPodSandbox(ctx context.Context, req *runtime.RunPodSandboxRequest) (*runtime.RunPodSandboxResponse, error) {
	cfg := req.GetConfig()
	if err := validate.SandboxConfig(cfg, hostSELinux()); err != nil {
		return nil, toStatus(err)
	}
	if err := s.checkHostPorts(cfg); err != nil {
		return nil, toStatus(err)
	}
	handler, err := s.handlerName(req.GetRuntimeHandler())
	if err != nil {
		return nil, toStatus(err)
	}
	if err := s.checkHandlerAvailable(handler); err != nil {
		return nil, toStatus(err)
	}
	if err := s.validatePodUserNamespace(cfg, handler); err != nil {
		return nil, toStatus(err)
	}
	if err := s.validateCgroupParent(cfg); err != nil {
		return nil, toStatus(err)
	}
	defer s.nri.BlockSync()()
	id := lifecycle.NewID()
	releaseIDs, err := s.pods.ClaimHostIDs(id, cfg)
	if err != nil {
		return nil, toStatus(err)
	}
	defer releaseIDs()
	name := lifecycle.SandboxName(cfg.GetMetadata())
	if err := s.sandboxNames.Reserve(name, id); err != nil {
		var reserved *store.ReservedError
		if errors.As(err, &reserved) {
			return nil, toStatus(markf(store.ErrNameReserved, "pod sandbox %s is already taken by sandbox %s", name, reserved.Owner))
		}
		return nil, toStatus(err)
	}
	// The object comes first: its lock is held before the record is made.
	sb := s.sandboxes.Add(id)
	sb.lock.Lock()
	defer sb.lock.Unlock()
	ctx, phases := lifecycle.WithPhases(ctx, s.metrics, "RunPodSandbox")
	defer phases.Observe()
	rec, err := s.pods.Run(ctx, podsandbox.Pod{ID: id, Name: name, Handler: handler, Config: cfg})
	if err != nil {
		s.sandboxes.Forget(id) // the undo did unless the record was never made or is kept
		s.sandboxNames.Release(name, id)
		return nil, toStatus(fmt.Errorf("run pod sandbox %s: %w", cfg.GetMetadata().GetName(), err))
	}
	// As containerd: both, with the sandbox's ID as the container's.
	s.podTransition(ctx, sb, rec, created)
	s.podTransition(ctx, sb, rec, started)
	return &runtime.RunPodSandboxResponse{PodSandboxId: id}, nil
}

// handlerName resolves a RuntimeClass handler; empty means the default one.
func (s *Server) handlerName(name string) (string, error) {
	if name == "" {
		return s.cfg.Runtime.DefaultHandler, nil
	}
	if _, ok := s.cfg.Runtime.Handlers[name]; !ok {
		return "", validate.Invalidf("runtime_handler", "no runtime handler %q is configured", name)
	}
	return name, nil
}

// pauseOptions confine a pod's infra process as its containers are: under
// the pod's AppArmor profile (the default one unless the pod names another
// or is privileged) on an AppArmor host.
func pauseOptions(cfg *runtime.PodSandboxConfig) (conmon.PauseOptions, error) {
	sc := cfg.GetLinux().GetSecurityContext()
	typ, name := securityProfile(sc.GetApparmor(), "", oci.ProfileUnconfined, "runtime/default")
	profile, err := oci.InfraAppArmorProfile(oci.AppArmorProfile{Type: typ, LocalhostName: name}, sc.GetPrivileged())
	if err != nil {
		return conmon.PauseOptions{}, fmt.Errorf("the pod's infra process: %w", err)
	}
	return conmon.PauseOptions{AppArmorProfile: profile}, nil
}
