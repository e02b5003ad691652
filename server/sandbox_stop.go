package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// StopPodSandbox stops every container of the pod and releases its network
// and namespaces. It succeeds for a sandbox that is already stopped or gone:
// the kubelet calls it again and again until it does.
func (s *Server) StopPodSandbox(ctx context.Context, req *runtime.StopPodSandboxRequest) (*runtime.StopPodSandboxResponse, error) {
	err := s.underSandboxLock(ctx, "StopPodSandbox", req.GetPodSandboxId(), func(ctx context.Context, id string) error {
		if err := s.stopSandbox(ctx, id); err != nil {
			return fmt.Errorf("stop pod sandbox %s: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &runtime.StopPodSandboxResponse{}, nil
}

// stopSandbox kills the sandbox's containers and releases its shared
// resources. The caller holds the sandbox's lock.
//
// The containers' kill and the network's teardown (CNI DEL, the longest
// step) run together: neither needs the other, and a container being killed
// has no use for its network. The infra process and the namespaces go once
// both are done.
func (s *Server) stopSandbox(ctx context.Context, id string) error {
	rec, err := s.sandboxes.Get(id)
	if err != nil {
		return err
	}
	wasUp := rec.NetworkUp
	killed := make(chan error, 1)
	go func(sb lifecycle.SandboxRecord) { killed <- s.killContainers(ctx, sb) }(rec) // a copy: teardownNetwork changes rec
	netErr := s.teardownNetwork(ctx, &rec)
	if err := <-killed; err != nil {
		return err
	}
	lifecycle.PhaseDone(ctx, "containers_after_cni")
	if netErr != nil {
		return netErr
	}
	if err := s.releaseSandboxResources(ctx, &rec); err != nil {
		return err
	}
	wasReady := rec.State != lifecycle.StateNotReady
	if !wasReady && !wasUp {
		return nil
	}
	// One write for the network's teardown and the new state.
	rec.State = lifecycle.StateNotReady
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "record"}, func(context.Context) error { return s.sandboxes.Put(id, rec) }); err != nil {
		return err
	}
	if wasReady {
		s.podTransition(ctx, s.pod(id), rec, stopped)
	}
	return nil
}

// killContainers kills the sandbox's containers together, so that a pod's
// stop waits for the slowest exit rather than for the sum of them.
func (s *Server) killContainers(ctx context.Context, sb lifecycle.SandboxRecord) error {
	s.killPodPIDNamespace(ctx, sb)
	return s.eachContainer(ctx, sb.ID, s.killContainer)
}

// podPIDKillGrace bounds the wait for the containers of a pod-wide PID
// namespace to be recorded exited once its init is gone; one still running
// after it is killed on its own.
const podPIDKillGrace = 2 * time.Second

// killPodPIDNamespace ends the pod's infra process first when containers
// run in the PID namespace it is the init of: the kernel then kills every
// process in it, which spares a runtime kill --all per container (a runc
// process each, beside the CNI DEL on a node's few cores). It waits, a
// little, for those containers' exits to be recorded, so that killContainer
// finds them exited.
func (s *Server) killPodPIDNamespace(ctx context.Context, sb lifecycle.SandboxRecord) {
	if sb.Infra.PID <= 0 {
		return
	}
	var exits []<-chan struct{}
	for _, c := range s.containersOf(sb.ID) {
		if (c.State == lifecycle.StateCreated || c.State == lifecycle.StateRunning) && inPodPIDNamespace(c) {
			exits = append(exits, s.ctr(c.ID).exited)
		}
	}
	if len(exits) == 0 {
		return
	}
	if err := s.infra.StopPause(ctx, sb.Infra); err != nil {
		s.log.WithField("pod", sb.ID).WithError(err).Warn("stop the pod's infra process; killing its containers one by one")
		return
	}
	for _, exited := range exits {
		waitClosed(ctx, exited, podPIDKillGrace)
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

// releaseSandboxResources takes down the pod network, the pinned namespaces
// and the pod's shm. Every step is idempotent and looks at what exists, not
// only at what the record says, because a crash may have come between making
// a thing and recording it.
func (s *Server) releaseSandboxResources(ctx context.Context, rec *lifecycle.SandboxRecord) error {
	if err := s.teardownNetwork(ctx, rec); err != nil {
		return err
	}
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "infra"}, func(ctx context.Context) error {
		if err := s.infra.StopPause(ctx, rec.Infra); err != nil {
			return err
		}
		// One the pod dir names but the record does not: a crash (or a
		// failed write) between its start and the record.
		unrecorded, err := stopRecordedInfra(ctx, rec.Dir, rec.Infra)
		if err != nil {
			return err
		}
		if rec.Infra.PID > 0 || unrecorded {
			s.scopeGone(ctx, infraScope(rec.ID), "infra process of pod "+rec.ID)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "unpin"}, func(context.Context) error { return s.unpinSandbox(rec) }); err != nil {
		return err
	}
	rec.ShmMounted = false
	return nil
}

// unpinSandbox releases the pod's pinned namespaces and unmounts its shm.
func (s *Server) unpinSandbox(rec *lifecycle.SandboxRecord) error {
	nsDir := filepath.Join(rec.Dir, "ns")
	pins := network.Namespaces{
		Dir: nsDir,
		Net: filepath.Join(nsDir, string(network.NamespaceNet)),
		IPC: filepath.Join(nsDir, string(network.NamespaceIPC)),
		UTS: filepath.Join(nsDir, string(network.NamespaceUTS)),
	}
	if err := s.pins.Unpin(pins); err != nil {
		return fmt.Errorf("unpin namespaces: %w", err)
	}
	if err := s.pins.UnmountShm(filepath.Join(rec.Dir, "shm")); err != nil {
		return fmt.Errorf("unmount pod shm: %w", err)
	}
	return nil
}

// teardownNetwork runs the CNI DEL of a pod whose network is (or may be) up.
func (s *Server) teardownNetwork(ctx context.Context, rec *lifecycle.SandboxRecord) error {
	if !rec.NetworkUp {
		return nil
	}
	cfg, err := rec.DecodeConfig()
	if err != nil {
		return err
	}
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "cni", Crash: "sandbox-release-after-cni-del"}, func(ctx context.Context) error {
		if err := s.cni.Teardown(ctx, podNetwork(*rec, cfg)); err != nil {
			return fmt.Errorf("tear down pod network: %w", err)
		}
		return nil
	}); err != nil {
		return err
	}
	// Written by the caller with the rest (the stopped state, or the
	// record's removal), not at once: a crash or a failed write before
	// then costs only a second teardown, which finds nothing to do since
	// the DEL removed the attachment record.
	rec.NetworkUp = false
	return nil
}

// removeSandbox removes everything of a sandbox, its record and its
// object: the undo of a failed RunPodSandbox, the end of RemovePodSandbox
// and the start-up repair of a cut-short RunPodSandbox. The caller holds the sandbox's lock
// and releases its name.
func (s *Server) removeSandbox(ctx context.Context, rec *lifecycle.SandboxRecord) error {
	if err := s.releaseSandboxResources(ctx, rec); err != nil {
		return err
	}
	lifecycle.CrashPoint("sandbox-remove-after-release")
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "files"}, func(context.Context) error {
		if err := os.RemoveAll(rec.Dir); err != nil {
			return fmt.Errorf("remove pod dir: %w", err)
		}
		return nil
	}); err != nil {
		return err
	}
	// And the object with it.
	return lifecycle.Step(ctx, lifecycle.StepOf{Phase: "record"}, func(context.Context) error { return s.sandboxes.Delete(rec.ID) })
}

// unmountIfMounted detaches a mount; a path that is not a mount point (or is
// not there) is fine.
func unmountIfMounted(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}
