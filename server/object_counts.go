package server

// countObjects registers the collectors of containers and sandboxes by
// state: they read the tables at each scrape, so no call that changes a
// state has to keep a gauge in step.
func (s *Server) countObjects() {
	s.metrics.CountObjects("containers", "Containers by the state of their record: creating, created, running, exited.", func() map[string]int {
		counts := map[string]int{stateCreating: 0, stateCreated: 0, stateRunning: 0, stateExited: 0}
		for _, c := range s.containers.List() {
			counts[c.State]++
		}
		return counts
	})
	s.metrics.CountObjects("pod_sandboxes", "Pod sandboxes by the state of their record: creating, ready, notready.", func() map[string]int {
		counts := map[string]int{stateCreating: 0, stateReady: 0, stateNotReady: 0}
		for _, sb := range s.sandboxes.List() {
			counts[sb.State]++
		}
		return counts
	})
}
