package podsandbox

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/minicri/minicri/internal/chans"
	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// Stop kills the sandbox's containers and releases its shared resources,
// and records it not ready. It answers the record as it left it, and
// whether it stopped a ready sandbox (a stop to be told of).
//
// The containers' kill and the network's teardown (CNI DEL, the longest
// step) run together: neither needs the other, and a container being killed
// has no use for its network. The infra process and the namespaces go once
// both are done.
func (c *Controller) Stop(ctx context.Context, id string) (_ lifecycle.SandboxRecord, stopped bool, _ error) {
	rec, err := c.deps.Records.Get(id)
	if err != nil {
		return rec, false, err
	}
	wasUp := rec.NetworkUp
	killed := make(chan error, 1)
	go func(sb lifecycle.SandboxRecord) { killed <- c.killContainers(ctx, sb) }(rec) // a copy: teardownNetwork changes rec
	netErr := c.teardownNetwork(ctx, &rec)
	if err := <-killed; err != nil {
		return rec, false, err
	}
	lifecycle.PhaseDone(ctx, "containers_after_cni")
	if netErr != nil {
		return rec, false, netErr
	}
	if err := c.release(ctx, &rec); err != nil {
		return rec, false, err
	}
	wasReady := rec.State != lifecycle.StateNotReady
	if !wasReady && !wasUp {
		return rec, false, nil
	}
	// One write for the network's teardown and the new state.
	rec.State = lifecycle.StateNotReady
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "record"}, func(context.Context) error { return c.deps.Records.Put(id, rec) }); err != nil {
		return rec, false, err
	}
	return rec, wasReady, nil
}

// killContainers kills the sandbox's containers together, so that a pod's
// stop waits for the slowest exit rather than for the sum of them.
func (c *Controller) killContainers(ctx context.Context, sb lifecycle.SandboxRecord) error {
	c.killPodPIDNamespace(ctx, sb)
	return c.deps.Containers.Kill(ctx, sb.ID)
}

// podPIDKillGrace bounds the wait for the containers of a pod-wide PID
// namespace to be recorded exited once its init is gone; one still running
// after it is killed on its own.
const podPIDKillGrace = 2 * time.Second

// killPodPIDNamespace ends the pod's infra process first when containers
// run in the PID namespace it is the init of: the kernel then kills every
// process in it, which spares a runtime kill --all per container (a runc
// process each, beside the CNI DEL on a node's few cores). It waits, a
// little, for those containers' exits to be recorded, so that the
// containers' kill finds them exited.
func (c *Controller) killPodPIDNamespace(ctx context.Context, sb lifecycle.SandboxRecord) {
	if sb.Infra.PID <= 0 {
		return
	}
	exits := c.deps.Containers.InPodPIDNamespace(sb.ID)
	if len(exits) == 0 {
		return
	}
	if err := c.deps.Infra.StopPause(ctx, sb.Infra); err != nil {
		c.deps.Log.WithField("pod", sb.ID).WithError(err).Warn("stop the pod's infra process; killing its containers one by one")
		return
	}
	for _, exited := range exits {
		chans.WaitClosed(ctx, exited, podPIDKillGrace)
	}
}

// release takes down the pod network, the infra process, the pinned
// namespaces and the pod's shm. Every step is idempotent and looks at what
// exists, not only at what the record says, because a crash may have come
// between making a thing and recording it.
func (c *Controller) release(ctx context.Context, rec *lifecycle.SandboxRecord) error {
	if err := c.teardownNetwork(ctx, rec); err != nil {
		return err
	}
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "infra"}, func(ctx context.Context) error {
		if err := c.deps.Infra.StopPause(ctx, rec.Infra); err != nil {
			return err
		}
		// One the pod dir names but the record does not: a crash (or a
		// failed write) between its start and the record.
		unrecorded, err := stopRecordedInfra(ctx, rec.Dir, rec.Infra)
		if err != nil {
			return err
		}
		if rec.Infra.PID > 0 || unrecorded {
			c.deps.ScopeGone(ctx, infraScope(rec.ID), "infra process of pod "+rec.ID)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "unpin"}, func(context.Context) error { return c.unpin(rec) }); err != nil {
		return err
	}
	rec.ShmMounted = false
	return nil
}

// unpin releases the pod's pinned namespaces and unmounts its shm.
func (c *Controller) unpin(rec *lifecycle.SandboxRecord) error {
	nsDir := filepath.Join(rec.Dir, "ns")
	pins := network.Namespaces{
		Dir: nsDir,
		Net: filepath.Join(nsDir, string(network.NamespaceNet)),
		IPC: filepath.Join(nsDir, string(network.NamespaceIPC)),
		UTS: filepath.Join(nsDir, string(network.NamespaceUTS)),
	}
	if err := c.deps.Pins.Unpin(pins); err != nil {
		return fmt.Errorf("unpin namespaces: %w", err)
	}
	if err := c.deps.Pins.UnmountShm(filepath.Join(rec.Dir, "shm")); err != nil {
		return fmt.Errorf("unmount pod shm: %w", err)
	}
	return nil
}

// teardownNetwork runs the CNI DEL of a pod whose network is (or may be) up.
func (c *Controller) teardownNetwork(ctx context.Context, rec *lifecycle.SandboxRecord) error {
	if !rec.NetworkUp {
		return nil
	}
	cfg, err := rec.DecodeConfig()
	if err != nil {
		return err
	}
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "cni", Crash: "sandbox-release-after-cni-del"}, func(ctx context.Context) error {
		if err := c.deps.Network.Teardown(ctx, PodNetwork(*rec, cfg)); err != nil {
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
