package server

import (
	"context"
	"fmt"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/lifecycle"
)

// StartContainer starts a created container's process.
func (s *Server) StartContainer(ctx context.Context, req *runtime.StartContainerRequest) (*runtime.StartContainerResponse, error) {
	rec, unlock, err := s.lockContainer(req.GetContainerId())
	if err != nil {
		return nil, toStatus(err)
	}
	defer unlock()
	id := rec.ID
	if rec.State != lifecycle.StateCreated {
		return nil, toStatus(markf(errWrongState, "container %s is %s, not created", id, rec.State))
	}
	rt, err := s.runtimes.Get(rec.Handler)
	if err != nil {
		return nil, toStatus(err)
	}
	// Taken before the start: a short-lived process may exit, and be
	// recorded, before runc start returns, and started must not follow finished.
	startedAt := time.Now().UnixNano()
	ctx, phases := lifecycle.WithPhases(ctx, s.metrics, "StartContainer")
	defer phases.Observe()
	c := s.ctr(id)
	if err := s.transition(ctx, c, rec, starting); err != nil {
		return nil, toStatus(fmt.Errorf("start container %s: %w", id, err))
	}
	// At the crash point the container runs, but is recorded as created.
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "runtime_start", Crash: "container-after-start"}, func(ctx context.Context) error { return rt.Start(ctx, id) }); err != nil {
		_ = s.transition(ctx, c, rec, startFailed)
		return nil, toStatus(fmt.Errorf("start container %s: %w", id, err))
	}
	user, userOK := runningUser(rec.Bundle)
	// Staged, not durable: the start-up repair derives running from the
	// runtime's state (crash point above), and after a crash of the
	// machine the process is gone whichever state the disk kept.
	err = lifecycle.Step(ctx, lifecycle.StepOf{Phase: "record"}, func(context.Context) error {
		_, err := s.containers.StageUpdate(id, func(r *lifecycle.ContainerRecord) error {
			if userOK {
				r.User = user
			}
			// The process may already have exited and been recorded: keep that.
			if r.State == lifecycle.StateCreated {
				r.State = lifecycle.StateRunning
			}
			r.StartedAt = startedAt
			return nil
		})
		return err
	})
	if err != nil {
		_ = s.transition(ctx, c, rec, startFailed)
		return nil, toStatus(err)
	}
	_ = s.transition(ctx, c, rec, started)
	return &runtime.StartContainerResponse{}, nil
}
