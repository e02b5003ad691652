package server

import (
	"context"
	"time"

	"github.com/minicri/minicri/conmon"
)

// recoverTimeout bounds the repair of one half-made object at start.
const recoverTimeout = time.Minute

// recover rebuilds the daemon's view of the node from the records and the
// running monitors: names are reserved again, half-made objects (a crash
// during a create) are rolled back, and running containers are watched again.
// Containers whose monitor ended while the daemon was down get their exit
// from the monitor's exit file.
func (s *Server) recover() {
	ctx, cancel := context.WithTimeout(context.Background(), recoverTimeout)
	defer cancel()
	for _, c := range s.containers.List() {
		if c.State == stateCreating {
			s.log.WithField("container", c.ID).Info("rolling back a container whose create was cut short")
			if err := s.discardContainer(ctx, c); err != nil {
				s.log.WithField("container", c.ID).WithError(err).Warn("roll back container")
			}
			continue
		}
		_ = s.containerNames.Reserve(c.Name, c.ID)
		switch {
		case c.State == stateExited:
		case conmon.Alive(c.Monitor.PID, c.Monitor.StartTime):
			s.watchMonitor(c)
		default:
			s.recordExit(c.ID)
		}
	}
	for _, sb := range s.sandboxes.List() {
		if sb.State == stateCreating {
			s.log.WithField("pod", sb.ID).Info("rolling back a sandbox whose create was cut short")
			for _, c := range s.containersOf(sb.ID) {
				_ = s.discardContainer(ctx, c)
			}
			if err := s.removeSandbox(ctx, &sb); err != nil {
				s.log.WithField("pod", sb.ID).WithError(err).Warn("roll back sandbox")
			}
			continue
		}
		_ = s.sandboxNames.Reserve(sb.Name, sb.ID)
	}
}
