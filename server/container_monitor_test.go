package server

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/minicri/minicri/internal/procstat"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

func TestMonitorPlacementReserve(t *testing.T) {
	// Pids no process has: placement never checks liveness but on release.
	small := lifecycle.MonitorRef{PID: 1 << 30, StartTime: 1, JoinDir: "/small"}
	full := lifecycle.MonitorRef{PID: 1<<30 + 1, StartTime: 1, JoinDir: "/full"}
	own := lifecycle.MonitorRef{PID: 1<<30 + 2, StartTime: 1} // not shared: no join dir
	setup := func() *monitorPlacement {
		p := newMonitorPlacement(4)
		p.assign(small, newContainer("a1"), "podA")
		for _, id := range []string{"b1", "b2", "b3"} {
			p.assign(full, newContainer(id), "podB")
		}
		p.assign(own, newContainer("c1"), "podC")
		return p
	}
	for _, tc := range []struct {
		name string
		pod  string
		edit func(*monitorPlacement)
		want lifecycle.MonitorRef
		ok   bool
	}{
		{name: "the pod's own monitor first", pod: "podA", want: small, ok: true},
		{name: "else the fullest with room", pod: "podZ", want: full, ok: true},
		{name: "never one that is not shared", pod: "podC", want: full, ok: true},
		{name: "never a full one", pod: "podB", edit: func(p *monitorPlacement) { p.assign(full, newContainer("b4"), "podB") }, want: small, ok: true},
		{name: "never a closed one", pod: "podA", edit: func(p *monitorPlacement) { p.markClosed(small) }, want: full, ok: true},
		{name: "none with room", pod: "podA", edit: func(p *monitorPlacement) {
			p.markClosed(small)
			p.assign(full, newContainer("b4"), "podB")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := setup()
			if tc.edit != nil {
				tc.edit(p)
			}
			got, ok := p.reserve(newContainer("new"), tc.pod)
			if ok != tc.ok || got != tc.want {
				t.Fatalf("reserve for %s = %+v, %v; want %+v, %v", tc.pod, got, ok, tc.want, tc.ok)
			}
			if ok && p.monitors[got.PID].containers["new"] != tc.pod {
				t.Error("the reservation does not count in the monitor")
			}
		})
	}
}

func TestMonitorPlacementRelease(t *testing.T) {
	ts := newTestServer(t)
	ts.monitors = newMonitorPlacement(8)
	dir := filepath.Join(t.TempDir(), "m")
	os.Mkdir(dir, 0o700)
	dead := lifecycle.MonitorRef{PID: 1 << 30, StartTime: 1, JoinDir: dir}
	a, b := newContainer("a"), newContainer("b")
	ts.monitors.assign(dead, a, "pod")
	ts.monitors.assign(dead, b, "pod")
	ts.releaseMonitor(a)
	ts.releaseMonitor(a) // twice: nothing more
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("join dir gone while the monitor still has a container: %v", err)
	}
	ts.releaseMonitor(b)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("join dir of a dead monitor after its last container: %v, want removed", err)
	}
	if len(ts.monitors.monitors) != 0 {
		t.Errorf("an empty monitor is still placed: %+v", ts.monitors.monitors)
	}
}

// TestReleaseMonitorWaitsForAKilledMonitor: a killed monitor's sockets
// close, and its containers' ends are seen, before it is gone; its join
// directory must still go once it is.
func TestReleaseMonitorWaitsForAKilledMonitor(t *testing.T) {
	ts := newTestServer(t)
	ts.monitors = newMonitorPlacement(8)
	dir := filepath.Join(t.TempDir(), "m")
	os.Mkdir(dir, 0o700)
	monitor := exec.Command("sleep", "60")
	if err := monitor.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { monitor.Process.Kill(); monitor.Wait() })
	st, err := procstat.Read(monitor.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	c := newContainer("c")
	ts.monitors.assign(lifecycle.MonitorRef{PID: monitor.Process.Pid, StartTime: st.StartTime, JoinDir: dir}, c, "pod")
	released := make(chan struct{})
	go func() {
		ts.releaseMonitor(c)
		close(released)
	}()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("join dir removed while its monitor lives: %v", err)
	}
	monitor.Process.Kill()
	monitor.Wait()
	select {
	case <-released:
	case <-time.After(killGrace + 5*time.Second):
		t.Fatal("releaseMonitor did not return once the monitor was gone")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("join dir of the killed monitor: %v, want removed", err)
	}
}

// A container of a monitor whose pid a later monitor took is no longer
// placed: its release neither empties nor drops the later monitor.
func TestMonitorPlacementReleaseAfterPIDReuse(t *testing.T) {
	p := newMonitorPlacement(8)
	old, later := newContainer("old"), newContainer("later")
	p.assign(lifecycle.MonitorRef{PID: 1 << 30, StartTime: 1}, old, "pod")
	p.assign(lifecycle.MonitorRef{PID: 1 << 30, StartTime: 2}, later, "pod")
	if ref, emptied := p.release(old); emptied {
		t.Errorf("releasing a container of a replaced monitor emptied %+v", ref)
	}
	if m := p.monitors[1<<30]; m == nil || m.ref.StartTime != 2 || len(m.containers) != 1 {
		t.Errorf("the later monitor is %+v, want placed with its one container", m)
	}
	if _, emptied := p.release(later); !emptied || len(p.monitors) != 0 {
		t.Errorf("releasing the later monitor's only container: emptied %v, %d monitors left", emptied, len(p.monitors))
	}
}
