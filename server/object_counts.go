package server

import (
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// countObjects registers the collectors of containers and sandboxes by
// state: they read the tables at each scrape, so no call that changes a
// state has to keep a gauge in step.
func (s *Server) countObjects() {
	s.metrics.CountObjects("containers", "Containers by the state of their record: creating, created, running, exited.", func() map[string]int {
		counts := map[string]int{lifecycle.StateCreating: 0, lifecycle.StateCreated.String(): 0, lifecycle.StateRunning.String(): 0, lifecycle.StateExited.String(): 0}
		for _, c := range s.containers.List() {
			counts[c.State.String()]++
		}
		return counts
	})
	s.metrics.CountObjects("pod_sandboxes", "Pod sandboxes by the state of their record: creating, ready, notready.", func() map[string]int {
		counts := map[string]int{lifecycle.StateCreating: 0, lifecycle.StateReady.String(): 0, lifecycle.StateNotReady.String(): 0}
		for _, sb := range s.sandboxes.List() {
			counts[sb.State.String()]++
		}
		return counts
	})
}
