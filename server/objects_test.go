package server

import (
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// objectCount is how many container and sandbox objects the server keeps.
func (s *Server) objectCount() (containers, sandboxes int) {
	s.objs.mu.Lock()
	defer s.objs.mu.Unlock()
	return len(s.objs.containers), len(s.objs.sandboxes)
}

// keptObject reports whether the server keeps an object for container id.
func (s *Server) keptObject(id string) bool {
	s.objs.mu.Lock()
	defer s.objs.mu.Unlock()
	_, ok := s.objs.containers[id]
	return ok
}

// What the daemon holds in memory for a container (its list encoding, its
// CPU sample, its exit) lives in its object, and the removal drops it all:
// nothing of the container is left in memory, and asking for it afterwards
// adds nothing back.
func TestRemovalDropsTheObjects(t *testing.T) {
	ts := newTestServer(t)
	podID, ctrID := ts.runningCtr(t, "web")
	resp, err := ts.ListContainers(bg, &runtime.ListContainersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Codec().Marshal(resp); err != nil {
		t.Fatal(err)
	}
	c := ts.ctr(ctrID)
	c.nanoCores(1, 1)
	c.mu.Lock()
	encoded := c.encoded.data != nil
	c.mu.Unlock()
	if !encoded {
		t.Fatal("the container's list encoding is not kept in its object: the test misses its point")
	}
	if containers, sandboxes := ts.objectCount(); containers != 1 || sandboxes != 1 {
		t.Fatalf("%d container and %d sandbox objects, want 1 and 1", containers, sandboxes)
	}

	if _, err := ts.RemovePodSandbox(bg, &runtime.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.exited:
	default:
		t.Error("the removed container's exit channel is still open: a stop would wait on it")
	}
	// A late caller (a stats call, the codec) gets a detached object.
	if _, ok := ts.ctr(ctrID).lastUsage(); ok {
		t.Error("the removed container's CPU sample is still there")
	}
	ts.pod(podID).nanoCores(1, 1)
	ts.wantNothingLeft(t, "after RemovePodSandbox")
}

// A start-up finds objects for the records it keeps, and none for those it
// rolls back.
func TestRecoverAddsObjectsOfKeptRecords(t *testing.T) {
	ts := newTestServer(t)
	_, ctrID := ts.runningCtr(t, "web")
	ts.objs = objects{}
	ts.recover()
	if !ts.keptObject(ctrID) {
		t.Error("no object for a recovered container")
	}
	if containers, sandboxes := ts.objectCount(); containers != 1 || sandboxes != 1 {
		t.Errorf("%d container and %d sandbox objects after the start-up, want 1 and 1", containers, sandboxes)
	}
}
