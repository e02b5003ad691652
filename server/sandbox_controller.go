package server

import (
	"context"
	"errors"
	"sync"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/podsandbox"
)

// podNetworking attaches pods to the pod network and detaches them
// (*network.CNI), for the controller; AttachedPods lists them for the
// start-up sweep.
type podNetworking interface {
	podsandbox.Network
	AttachedPods() ([]string, error)
}

// usePods makes the pod sandboxes' controller (server/podsandbox) on what
// the server holds: the sandboxes' records, CNI, the pins, the infra
// starter, and the pod's containers (podContainers). New and the tests
// call it once the tables are open and those are wired in.
func (s *Server) usePods() {
	s.pods = podsandbox.New(podsandbox.Options{
		RunDir:      s.cfg.RunDir,
		MonitorPath: s.monitorPath,
		Systemd:     s.cfg.CgroupDriver == config.SystemdDriver,
	}, podsandbox.Deps{
		Records:      s.sandboxes,
		Network:      s.cni,
		Pins:         s.pins,
		Infra:        s.infra,
		Containers:   podContainers{s},
		InfraOptions: pauseOptions,
		PluginsRun:   s.nriRunPodSandbox,
		ToScope:      s.leaveDaemonCgroup,
		ScopeGone:    s.scopeGone,
		Log:          s.log,
		Metrics:      s.metrics,
	})
}

// podContainers is what the pod controller does to a pod's containers,
// through the container handlers' own calls, each under the container's
// lock (the controller's caller holds the sandbox's).
type podContainers struct{ s *Server }

func (pc podContainers) InPodPIDNamespace(podID string) []<-chan struct{} {
	var exits []<-chan struct{}
	for _, c := range pc.s.containersOf(podID) {
		if (c.State == lifecycle.StateCreated || c.State == lifecycle.StateRunning) && inPodPIDNamespace(c) {
			exits = append(exits, pc.s.ctr(c.ID).exited)
		}
	}
	return exits
}

func (pc podContainers) Kill(ctx context.Context, podID string) error {
	return pc.s.eachContainer(ctx, podID, pc.s.killContainer)
}

func (pc podContainers) Remove(ctx context.Context, podID string) error {
	return pc.s.eachContainer(ctx, podID, pc.s.removeContainer)
}

// Discard is sequential and keeps no error: start-up repair, where the
// sweep of orphans finds what is left.
func (pc podContainers) Discard(ctx context.Context, podID string) {
	for _, c := range pc.s.containersOf(podID) {
		_ = pc.s.discardContainer(ctx, c)
	}
}

// inPodPIDNamespace reports whether the container joined its pod's PID
// namespace, as container_spec.go decides it: POD, the CRI's zero value,
// in a pod that has an infra process.
func inPodPIDNamespace(c lifecycle.ContainerRecord) bool {
	cfg, err := c.DecodeConfig()
	return err == nil && cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetPid() == runtime.NamespaceMode_POD
}

// eachContainer runs fn on each of the sandbox's containers at once and
// joins their errors: the containers' steps are their own, so a pod's
// takes the slowest of them rather than their sum.
func (s *Server) eachContainer(ctx context.Context, sandboxID string, fn func(ctx context.Context, id string) error) error {
	containers := s.containersOf(sandboxID)
	errs := make([]error, len(containers))
	var wg sync.WaitGroup
	for i, c := range containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(ctx, c.ID)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
