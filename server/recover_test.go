package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	logtest "github.com/sirupsen/logrus/hooks/test"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/conmon/wire"
	"github.com/minicri/minicri/internal/procstat"
	"github.com/minicri/minicri/metrics"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

func TestProcessStartTime(t *testing.T) {
	got, err := processStartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// This test process started a moment ago; the boot time has whole
	// seconds, the start time clock ticks.
	if now := time.Now(); got.After(now) || got.Before(now.Add(-10*time.Minute)) {
		t.Fatalf("start time of this process = %v, now %v", got, now)
	}
	if _, err := processStartTime(1 << 30); err == nil {
		t.Fatal("start time of a pid that cannot exist: no error")
	}
}

func TestIDDirsOnlyListsIDs(t *testing.T) {
	dir := t.TempDir()
	id := strings.Repeat("0f", 32)
	for _, name := range []string{id, "lost+found", strings.Repeat("x", 64), id[:10]} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, strings.Repeat("1", 64)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := idDirs(dir); len(got) != 1 || got[0] != id {
		t.Fatalf("idDirs = %v, want only %s", got, id)
	}
	if got := idDirs(filepath.Join(dir, "missing")); got != nil {
		t.Fatalf("idDirs of a missing dir = %v", got)
	}
}

// The start-up sweep stops an infra process only from the record in one of
// the daemon's own pod dirs, and only while it is the recorded process
// (same start time) that no sandbox record holds.
func TestSweepStopsOnlyRecordedInfraProcesses(t *testing.T) {
	ts := newTestServer(t)
	pods := filepath.Join(ts.cfg.RunDir, "pods")
	start := func(t *testing.T) (*exec.Cmd, conmon.Infra) {
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		st, err := procstat.Read(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		return cmd, conmon.Infra{PID: cmd.Process.Pid, StartTime: st.StartTime}
	}
	record := func(t *testing.T, id string, in conmon.Infra) string {
		dir := filepath.Join(pods, id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(in)
		if err := os.WriteFile(filepath.Join(dir, conmon.InfraRecordName), data, 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	type proc struct {
		cmd  *exec.Cmd
		what string
		stop bool
	}
	var procs []proc

	// A pod dir without a sandbox record: removed, its infra stopped.
	cmd, in := start(t)
	record(t, strings.Repeat("a", 64), in)
	procs = append(procs, proc{cmd, "recorded in a pod dir without a sandbox", true})
	// A sandbox record that holds none (a crash before its update).
	cmd, in = start(t)
	id := strings.Repeat("b", 64)
	if err := ts.sandboxes.Put(id, lifecycle.SandboxRecord{ID: id, State: lifecycle.StateReady, Dir: record(t, id, in)}); err != nil {
		t.Fatal(err)
	}
	procs = append(procs, proc{cmd, "recorded in a pod dir whose sandbox holds none", true})
	// The sandbox's own infra process.
	cmd, in = start(t)
	id = strings.Repeat("c", 64)
	if err := ts.sandboxes.Put(id, lifecycle.SandboxRecord{ID: id, State: lifecycle.StateReady, Dir: record(t, id, in), Infra: in}); err != nil {
		t.Fatal(err)
	}
	procs = append(procs, proc{cmd, "the sandbox's own", false})
	// A recorded pid now another process's (another start time).
	cmd, in = start(t)
	in.StartTime++
	record(t, strings.Repeat("d", 64), in)
	procs = append(procs, proc{cmd, "a reused pid", false})
	// Recorded nowhere: whatever its command line, nothing names it.
	cmd, _ = start(t)
	procs = append(procs, proc{cmd, "recorded nowhere", false})

	ts.sweepOrphans(context.Background())
	for _, p := range procs {
		st, err := procstat.Read(p.cmd.Process.Pid)
		alive := err == nil && st.Live()
		if alive == p.stop {
			t.Errorf("process %s: alive %v after the sweep, want %v", p.what, alive, !p.stop)
		}
	}
}

// A shared monitor that still runs, one of whose containers ended while the
// daemon was down: the recovery places every container on the monitor
// before it records that exit, so the release of the ended one does not
// take the monitor for emptied and wait killGrace for it to end.
func TestRecoverPlacesSharedMonitorBeforeRecordingExits(t *testing.T) {
	ts := newTestServer(t, func(c *config.Config) { c.Runtime.MonitorShare = 2 })
	pod := podConfig("web")
	podID := ts.runPod(t, pod)
	var ids []string
	for _, name := range []string{"a", "b"} {
		id := ts.createCtr(t, podID, pod, ctrConfig(name))
		if _, err := ts.StartContainer(bg, &runtime.StartContainerRequest{ContainerId: id}); err != nil {
			t.Fatalf("StartContainer: %v", err)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	ended, running := ids[0], ids[1] // the ended one is recovered first
	// The monitor, to the next daemon, is this process: alive.
	self, err := procstat.Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	monitor := lifecycle.MonitorRef{PID: os.Getpid(), StartTime: self.StartTime, JoinDir: filepath.Join(ts.cfg.RunDir, "monitors", strings.Repeat("e", 64))}
	for _, id := range ids {
		if _, err := ts.containers.Update(id, func(r *lifecycle.ContainerRecord) error { r.Monitor = monitor; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	rec, _ := ts.containers.Get(ended)
	exit := wire.ExitStatus{Code: 3, At: time.Now()}
	if err := os.WriteFile(exitFile(rec), exit.Marshal(), 0o600); err != nil {
		t.Fatal(err)
	}

	s2 := ts.restarted(t)
	logs := logtest.NewLocal(ts.log.Logger)
	s2.recoverContainers(bg)
	for _, e := range logs.AllEntries() {
		if strings.Contains(e.Message, "still there after its last container") {
			t.Errorf("the recovery waited for a monitor that serves %s: %s", running, e.Message)
		}
	}
	if got, _ := s2.containers.Get(ended); got.State != lifecycle.StateExited || got.ExitCode != 3 {
		t.Errorf("ended container: state %v, exit %d; want exited with 3", got.State, got.ExitCode)
	}
	if got, _ := s2.containers.Get(running); got.State != lifecycle.StateRunning {
		t.Errorf("running container: state %v, want running", got.State)
	}
	s2.monitors.mu.Lock()
	placed := s2.ctr(running).placed
	s2.monitors.mu.Unlock()
	if placed == nil || placed.ref.PID != monitor.PID {
		t.Errorf("running container placed on %v, want its monitor %d", placed, monitor.PID)
	}
}

// The liveness of a monitor is read once, and a recorded start time that is
// not the process's is a dead monitor whatever its pid (pid reuse).
func TestMonitorLivenessKeysOnStartTime(t *testing.T) {
	self, err := procstat.Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	alive := monitorLiveness{}
	me := lifecycle.MonitorRef{PID: os.Getpid(), StartTime: self.StartTime, JoinDir: "/a"}
	if !alive.of(me) {
		t.Error("a live monitor is dead")
	}
	if alive.of(lifecycle.MonitorRef{PID: os.Getpid(), StartTime: self.StartTime + 1}) {
		t.Error("a pid with another start time is alive")
	}
	me.JoinDir = "/b"
	if !alive.of(me) || len(alive) != 2 {
		t.Errorf("liveness kept %d answers for one monitor and one impostor, want 2", len(alive))
	}
}

// The recovery marks its phases on the start's timer, which make bench
// shows as the rows of a restart.
func TestRecoverMarksItsPhases(t *testing.T) {
	ts := newTestServer(t)
	ts.metrics = metrics.New()
	ctx, p := lifecycle.WithPhases(bg, ts.metrics, "Start")
	ts.recover(ctx)
	p.Observe()
	rec := httptest.NewRecorder()
	ts.metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, phase := range []string{"containers", "sandboxes", "sweep"} {
		want := `minicri_operation_phase_duration_seconds_count{operation="Start",phase="` + phase + `"} 1`
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
}
