package server

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/store"
)

// watchContainer records the container's exit when its monitor is done
// with it: the monitor closes the watch's connection right after writing
// the exit file, or dies, with no polling either way.
func (s *Server) watchContainer(rec lifecycle.ContainerRecord) {
	s.tryWatch(rec, 0)
}

// tryWatch watches the container, or, when the watch fails, decides by its
// monitor: gone, the container is recorded as ended (and killed when it
// left no exit file); alive, the failure was the daemon's own (out of
// descriptors or memory, a backlog full for long) and must not cost the
// container its life, so the watch is tried again, ever less often, for
// as long as the monitor lives and the container is known.
func (s *Server) tryWatch(rec lifecycle.ContainerRecord, tries int) {
	err := s.monitor.WatchContainer(rec.Bundle, func() { s.recordExit(rec.ID) })
	if err == nil {
		return
	}
	log := s.log.WithField("container", rec.ID).WithError(err)
	if !s.hooks.processAlive(rec.Monitor.PID, rec.Monitor.StartTime) {
		log.Warn("cannot watch the container's monitor, which is gone")
		s.recordExit(rec.ID)
		return
	}
	wait := s.hooks.watchRetry(tries)
	log.WithField("retry_in", wait).Warn("cannot watch the container's monitor, which still runs; trying again")
	time.AfterFunc(wait, func() {
		if cur, err := s.containers.Get(rec.ID); err == nil && cur.State != lifecycle.StateExited {
			s.tryWatch(rec, tries+1)
		}
	})
}

// recordExit writes a container's end into its record, from the monitor's
// exit file. A monitor that died without one (killed) leaves a container
// that nobody reaps or logs for: it is killed and recorded as failed, so it
// never shows as running when it is not watched.
func (s *Server) recordExit(id string) {
	c := s.ctr(id)
	s.releaseMonitor(c)
	rec, err := s.containers.Get(id)
	if err != nil {
		return // removed meanwhile
	}
	exit, ok, err := conmon.ReadExit(exitFile(rec))
	if err != nil || !ok {
		s.log.WithFields(logrus.Fields{"container": id, "monitor": rec.Monitor.PID, "monitor_alive": conmon.Alive(rec.Monitor.PID, rec.Monitor.StartTime)}).
			WithError(err).Warn("the container's monitor let go of it without an exit file; killing the container")
		s.killOrphan(rec)
		s.metrics.MonitorDied()
		exit = conmon.Exit{Code: 128 + int(syscall.SIGKILL), At: time.Now()}
	}
	// Observe, not Update: the container is gone whatever the disk says, and
	// a full disk must not leave it listed as running.
	_, err = s.containers.Observe(id, func(r *lifecycle.ContainerRecord) error {
		if r.State == lifecycle.StateExited {
			return nil
		}
		r.State = lifecycle.StateExited
		r.ExitCode = int32(exit.Code)
		r.FinishedAt = exit.At.UnixNano()
		r.Reason, r.Message = exitReason(exit, ok)
		return nil
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.WithField("container", id).WithError(err).Error("record container exit")
	}
	// Stopped however it ended: StopContainer, a kill, the process's own
	// exit or its monitor's death. The kubelet relists the pod on it.
	_ = s.transition(context.Background(), c, rec, stopped)
}

// exitReason is the CRI reason and message of an exit.
func exitReason(exit conmon.Exit, monitorFinished bool) (reason, message string) {
	switch {
	case !monitorFinished:
		return "Error", "the container's monitor died; the container was killed"
	case exit.Reason != "":
		return exit.Reason, ""
	case exit.Code == 0:
		return "Completed", ""
	default:
		return "Error", ""
	}
}

// killOrphan kills a container whose monitor is gone.
func (s *Server) killOrphan(rec lifecycle.ContainerRecord) {
	rt, err := s.runtimes.Get(rec.Handler)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rt.Kill(ctx, rec.ID, syscall.SIGKILL, true); err != nil {
		s.log.WithField("container", rec.ID).WithError(err).Debug("kill orphaned container")
	}
}
