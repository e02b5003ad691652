package server

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/conmon/wire"
	"github.com/minicri/minicri/internal/procstat"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// objectCount is how many container and sandbox objects the server keeps.
func (s *Server) objectCount() (containers, sandboxes int) {
	return s.containers.Objects(), s.sandboxes.Objects()
}

// keptObject reports whether the server keeps an object for container id.
func (s *Server) keptObject(id string) bool {
	_, ok := s.containers.Object(id)
	return ok
}

// What the daemon holds in memory for a container (its CPU sample, its
// exit) lives in its object, and the removal drops it all:
// nothing of the container is left in memory, and asking for it afterwards
// adds nothing back.
func TestRemovalDropsTheObjects(t *testing.T) {
	ts := newTestServer(t)
	podID, ctrID := ts.runningCtr(t, "web")
	c := ts.ctr(ctrID)
	c.nanoCores(1, 1)
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
	// A late caller (a stats call) gets a detached object.
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
	podID, ctrID := ts.runningCtr(t, "web")
	cut := lifecycle.ContainerRecord{ID: "cut", SandboxID: podID, State: lifecycle.StateCreating, Handler: "runc", Bundle: filepath.Join(ts.cfg.RunDir, "containers", "cut")}
	if err := ts.containers.Put(cut.ID, cut); err != nil {
		t.Fatal(err)
	}
	ts.restart(t)
	if !ts.keptObject(ctrID) {
		t.Error("no object for a recovered container")
	}
	if ts.keptObject(cut.ID) {
		t.Error("an object is left of the container whose cut-short create was rolled back")
	}
	if containers, sandboxes := ts.objectCount(); containers != 1 || sandboxes != 1 {
		t.Errorf("%d container and %d sandbox objects after the start-up, want 1 and 1", containers, sandboxes)
	}
}

// A container whose shared monitor is still alive but which ended while the
// daemon was down has its exit file already: the start-up records it at
// once, not when the monitor's watch next fires, so that no call after the
// start-up sees it running.
func TestRecoverRecordsAnExitFoundWithALiveMonitor(t *testing.T) {
	ts := newTestServer(t)
	_, ctrID := ts.runningCtr(t, "web")
	self, err := procstat.Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	rec, err := ts.containers.Update(ctrID, func(r *lifecycle.ContainerRecord) error {
		r.Monitor.PID, r.Monitor.StartTime = os.Getpid(), self.StartTime // alive
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The exit file alone: the fake monitor's watch never fires.
	if err := os.WriteFile(exitFile(rec), wire.ExitStatus{Code: 3, At: time.Now()}.Marshal(), 0o600); err != nil {
		t.Fatal(err)
	}
	ts.restart(t)
	if got := ts.ctrState(t, ctrID); got != runtime.ContainerState_CONTAINER_EXITED {
		t.Fatalf("state right after the start-up = %v, want EXITED (its exit file was there)", got)
	}
}

// restart drops what the server holds in memory and reads it again from
// its records, as a start does (without the rest of New).
func (ts *testServer) restart(t *testing.T) {
	t.Helper()
	if err := ts.openTables(); err != nil {
		t.Fatal(err)
	}
	ts.usePods() // on the new tables
	ts.recover(bg)
}
