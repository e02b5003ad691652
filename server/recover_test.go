package server

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/internal/procstat"
	"github.com/minicri/minicri/network"
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

func TestSandboxLoss(t *testing.T) {
	id := strings.Repeat("a", 64)
	gone := filepath.Join(t.TempDir(), "net") // not a namespace file
	self, err := processStartTimeTicks(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		rec      sandboxRecord
		attached map[string]bool
		lost     string // a word of the answer; "" for a whole sandbox
	}{
		{"host namespaces, no network", sandboxRecord{ID: id}, map[string]bool{}, ""},
		{"pin gone", sandboxRecord{ID: id, Namespaces: network.Namespaces{Net: gone}}, nil, "pinned"},
		{"network torn down", sandboxRecord{ID: id, NetworkUp: true}, map[string]bool{}, "network"},
		{"network attached", sandboxRecord{ID: id, NetworkUp: true}, map[string]bool{id: true}, ""},
		{"attachments unknown", sandboxRecord{ID: id, NetworkUp: true}, nil, ""},
		{"infra process alive", sandboxRecord{ID: id, Infra: conmon.Infra{PID: os.Getpid(), StartTime: self}}, nil, ""},
		{"infra process gone", sandboxRecord{ID: id, Infra: conmon.Infra{PID: os.Getpid(), StartTime: self + 1}}, nil, "infra"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := sandboxLoss(c.rec, c.attached)
			if (got == "") != (c.lost == "") || !strings.Contains(got, c.lost) {
				t.Fatalf("sandboxLoss = %q, want %q", got, c.lost)
			}
		})
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

// processStartTimeTicks is field 22 of /proc/PID/stat, as conmon records it.
func processStartTimeTicks(pid int) (uint64, error) {
	start, err := processStartTime(pid)
	if err != nil {
		return 0, err
	}
	boot, err := bootTime()
	if err != nil {
		return 0, err
	}
	return uint64(start.Sub(boot) * clockTicks / time.Second), nil
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
	if err := ts.sandboxes.Put(id, sandboxRecord{ID: id, State: stateReady, Dir: record(t, id, in)}); err != nil {
		t.Fatal(err)
	}
	procs = append(procs, proc{cmd, "recorded in a pod dir whose sandbox holds none", true})
	// The sandbox's own infra process.
	cmd, in = start(t)
	id = strings.Repeat("c", 64)
	if err := ts.sandboxes.Put(id, sandboxRecord{ID: id, State: stateReady, Dir: record(t, id, in), Infra: in}); err != nil {
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
