package server

import (
	"context"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/lifecycle"
)

// lifecyclePoint is a point in the life of a container or a pod sandbox that the
// rest of the daemon is told of, in transition and podTransition: the
// GetContainerEvents subscribers and the NRI plugins (server/nri.go). NRI's
// events that carry or change what is being made (RunPodSandbox before the
// pod is recorded ready, CreateContainer's adjustment of the spec, the
// updates of resources) are called where that is at hand instead.
//
// The object counts need no telling: their collectors read the tables at
// each scrape (object_counts.go).
type lifecyclePoint int

const (
	// creating is a container about to be created, its record staged and
	// nothing made yet. transition's error fails the create.
	creating lifecyclePoint = iota + 1
	// created is a container created by its runtime and recorded as such,
	// or a sandbox made and recorded ready.
	created
	// starting is a container about to be started by its runtime.
	// transition's error fails the start.
	starting
	// started is a container whose start was recorded, or a ready sandbox.
	started
	// startFailed is a container whose runtime start failed, after starting.
	startFailed
	// stopped is a container whose exit was recorded, however it ended
	// (StopContainer, a kill, its own exit, its monitor's death), or a
	// sandbox stopped.
	stopped
	// removed is a container or a sandbox whose record is deleted, and its
	// object with it.
	removed
)

func (l lifecyclePoint) String() string {
	return [...]string{"", "creating", "created", "starting", "started", "start failed", "stopped", "removed"}[l]
}

// transition tells a container's lifecycle point; rec is its record as
// it is now (its last, for removed). Only creating and starting can fail,
// and only those points' errors are returned.
//
// The STARTED event always comes before STOPPED: a short-lived process can
// exit, and its exit be recorded by the watch, before StartContainer has
// recorded the start; its stopped point then waits for the start's end.
func (s *Server) transition(ctx context.Context, c *container, rec lifecycle.ContainerRecord, to lifecyclePoint) error {
	switch to {
	case creating:
		return nil
	case created:
		s.nriPostCreateContainer(ctx, rec)
		s.containerEvent(rec.ID, rec.SandboxID, runtime.ContainerEventType_CONTAINER_CREATED_EVENT)
	case starting:
		// A plugin refuses the start before anything is marked.
		if err := s.nriStartContainer(ctx, rec); err != nil {
			return err
		}
		// Marked first: the process may exit, and its exit be recorded,
		// before the start returns. A point that fails here unmarks it.
		c.mu.Lock()
		c.starting, c.exitedDuringStart = true, false
		c.mu.Unlock()
		return nil
	case started, startFailed:
		// STARTED goes out while the start is still marked: an exit
		// recorded meanwhile leaves its event to us, one recorded after
		// sends its own, after this one.
		if to == started {
			s.containerEvent(rec.ID, rec.SandboxID, runtime.ContainerEventType_CONTAINER_STARTED_EVENT)
			s.nriPostStartContainer(ctx, rec.ID)
		}
		c.mu.Lock()
		exited := c.exitedDuringStart
		c.starting, c.exitedDuringStart = false, false
		c.mu.Unlock()
		if exited {
			s.containerEvent(rec.ID, rec.SandboxID, runtime.ContainerEventType_CONTAINER_STOPPED_EVENT)
		}
	case stopped:
		// rec is the record from before the exit was written: once per
		// container, and before a waiting StopContainer returns.
		if rec.State != lifecycle.StateExited {
			s.nriStopContainer(ctx, rec.ID)
		}
		c.mu.Lock()
		deferred := c.starting
		if deferred {
			c.exitedDuringStart = true
		}
		c.mu.Unlock()
		if !deferred {
			s.containerEvent(rec.ID, rec.SandboxID, runtime.ContainerEventType_CONTAINER_STOPPED_EVENT)
		}
		c.markExited()
	case removed:
		s.containerEvent(rec.ID, rec.SandboxID, runtime.ContainerEventType_CONTAINER_DELETED_EVENT)
		s.nriRemoveContainer(ctx, rec)
	}
	return nil
}

// podTransition tells a sandbox's lifecycle point: created, started,
// stopped or removed; rec is its record as it is now. A sandbox is ready
// once created, so RunPodSandbox tells both, as containerd does. For
// removed, rec is the sandbox's last record: the table has none any more,
// and the events still say which pod it was, STOPPED first when it was
// removed ready.
func (s *Server) podTransition(ctx context.Context, sb *sandbox, rec lifecycle.SandboxRecord, to lifecyclePoint) {
	switch to {
	case created:
		s.containerEvent(sb.id, sb.id, runtime.ContainerEventType_CONTAINER_CREATED_EVENT)
	case started:
		s.containerEvent(sb.id, sb.id, runtime.ContainerEventType_CONTAINER_STARTED_EVENT)
	case stopped:
		s.containerEvent(sb.id, sb.id, runtime.ContainerEventType_CONTAINER_STOPPED_EVENT)
		s.nriStopPodSandbox(ctx, rec)
	case removed:
		s.sandboxRemovedEvents(rec, rec.State == lifecycle.StateReady)
		s.nriRemovePodSandbox(ctx, rec)
	}
}
