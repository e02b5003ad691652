package podsandbox

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/server/internal/fake"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/internal/testreq"
	"github.com/minicri/minicri/store"
)

var bg = context.Background()

// testObject is what the server's table keeps beside a record, here
// nothing more.
type testObject struct {
	store.Slot[lifecycle.SandboxRecord]
}

// fakeContainers are a pod's containers as the server would act on them:
// each call is noted in order.
type fakeContainers struct {
	mu     sync.Mutex
	calls  []string
	exits  []<-chan struct{} // of the containers in the pod's PID namespace
	onKill func()
}

func (f *fakeContainers) note(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeContainers) noted() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeContainers) InPodPIDNamespace(string) []<-chan struct{} { return f.exits }

func (f *fakeContainers) Kill(context.Context, string) error {
	f.note("kill containers")
	return nil
}

func (f *fakeContainers) Remove(context.Context, string) error {
	f.note("remove containers")
	return nil
}

func (f *fakeContainers) Discard(context.Context, string) { f.note("discard containers") }

// testController is a controller on a real record table in a temp dir and
// the fakes of server/internal/fake: no Server, no root, no CNI.
type testController struct {
	*Controller
	runDir     string
	network    *fake.Network
	pins       *fake.Pins
	monitor    *fake.Monitor
	containers *fakeContainers
}

func newTestController(t *testing.T) *testController {
	t.Helper()
	dir := t.TempDir()
	records, _, err := store.Open[lifecycle.SandboxRecord](filepath.Join(dir, "sandboxes"), func(string) *testObject { return &testObject{} })
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	tc := &testController{
		runDir:     filepath.Join(dir, "run"),
		network:    fake.NewNetwork(),
		pins:       fake.NewPins(),
		monitor:    fake.NewMonitor(),
		containers: &fakeContainers{},
	}
	tc.Controller = New(Options{RunDir: tc.runDir, MonitorPath: "minicri-conmon"}, Deps{
		Records:      records,
		Network:      tc.network,
		Pins:         tc.pins,
		Infra:        tc.monitor,
		Containers:   tc.containers,
		InfraOptions: func(*runtime.PodSandboxConfig) (conmon.PauseOptions, error) { return conmon.PauseOptions{}, nil },
		PluginsRun:   func(context.Context, lifecycle.SandboxRecord) error { return nil },
		ToScope:      func(context.Context, int, uint64, string, string, string) {},
		ScopeGone:    func(context.Context, string, string) {},
		Log:          logrus.NewEntry(log),
	})
	return tc
}

// A pod that shares its PID namespace (the CRI's default) is stopped by
// its infra process first: the kernel ends the namespace's processes with
// their init, and the containers' kill finds them exited. Stop tells a
// stop once, for the ready pod; Remove leaves nothing.
func TestStopEndsThePodPIDNamespaceFirst(t *testing.T) {
	tc := newTestController(t)
	id := lifecycle.NewID()
	rec, err := tc.Run(bg, Pod{ID: id, Name: "web", Handler: "runc", Config: testreq.Sandbox()})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rec.State != lifecycle.StateReady || rec.Infra.PID <= 0 || len(rec.IPs) != 1 {
		t.Fatalf("Run answered %+v; want ready, with an infra process and an IP", rec)
	}
	exited := make(chan struct{})
	tc.containers.exits = []<-chan struct{}{exited}
	tc.monitor.OnStopPause = func(conmon.Infra) {
		tc.containers.note("stop infra")
		close(exited)
	}

	rec, wasReady, err := tc.Stop(bg, id)
	if err != nil || !wasReady || rec.State != lifecycle.StateNotReady {
		t.Fatalf("Stop = %v, %v, %v; want a not-ready record, a stop to tell, no error", rec.State, wasReady, err)
	}
	if got, want := tc.containers.noted(), []string{"stop infra", "kill containers"}; !slices.Equal(got, want) {
		t.Errorf("the stop did %q, want %q", got, want)
	}
	if tc.network.Attached() != 0 || tc.pins.Held() != 0 || tc.monitor.Infras() != 0 {
		t.Errorf("after Stop: %d attachments, %d pins, %d infra processes; want none", tc.network.Attached(), tc.pins.Held(), tc.monitor.Infras())
	}
	if _, wasReady, err := tc.Stop(bg, id); err != nil || wasReady {
		t.Errorf("a second Stop = %v, %v; want no stop to tell, no error", wasReady, err)
	}

	if _, err := tc.Remove(bg, rec); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := tc.deps.Records.Get(id); err == nil {
		t.Error("the record is left after Remove")
	}
	if _, err := os.Stat(filepath.Join(tc.runDir, "pods", id)); !os.IsNotExist(err) {
		t.Errorf("the pod dir is left after Remove: %v", err)
	}
}

// A failed Run undoes what it made: pins, infra process, pod dir, record.
func TestRunUndoesWhatItMadeOnFailure(t *testing.T) {
	tc := newTestController(t)
	tc.network.Fail("Setup", fake.ErrInjected)
	id := lifecycle.NewID()
	_, err := tc.Run(bg, Pod{ID: id, Name: "web", Handler: "runc", Config: testreq.Sandbox()})
	if err == nil || !strings.Contains(err.Error(), fake.ErrInjected.Error()) {
		t.Fatalf("Run = %v, want the network's error", err)
	}
	if tc.pins.Held() != 0 || tc.monitor.Infras() != 0 || len(tc.deps.Records.List()) != 0 {
		t.Errorf("after the failed Run: %d pins, %d infra processes, %d records; want none", tc.pins.Held(), tc.monitor.Infras(), len(tc.deps.Records.List()))
	}
	if _, err := os.Stat(filepath.Join(tc.runDir, "pods", id)); !os.IsNotExist(err) {
		t.Errorf("the pod dir is left after the failed Run: %v", err)
	}
}
