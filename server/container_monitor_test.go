package server

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMonitorPlacementReserve(t *testing.T) {
	// Pids no process has: placement never checks liveness but on release.
	small := monitorRef{PID: 1 << 30, StartTime: 1, JoinDir: "/small"}
	full := monitorRef{PID: 1<<30 + 1, StartTime: 1, JoinDir: "/full"}
	own := monitorRef{PID: 1<<30 + 2, StartTime: 1} // not shared: no join dir
	setup := func() *monitorPlacement {
		p := newMonitorPlacement(4)
		p.assign(small, "a1", "podA")
		for _, id := range []string{"b1", "b2", "b3"} {
			p.assign(full, id, "podB")
		}
		p.assign(own, "c1", "podC")
		return p
	}
	for _, tc := range []struct {
		name string
		pod  string
		edit func(*monitorPlacement)
		want monitorRef
		ok   bool
	}{
		{name: "the pod's own monitor first", pod: "podA", want: small, ok: true},
		{name: "else the fullest with room", pod: "podZ", want: full, ok: true},
		{name: "never one that is not shared", pod: "podC", want: full, ok: true},
		{name: "never a full one", pod: "podB", edit: func(p *monitorPlacement) { p.assign(full, "b4", "podB") }, want: small, ok: true},
		{name: "never a closed one", pod: "podA", edit: func(p *monitorPlacement) { p.markClosed(small) }, want: full, ok: true},
		{name: "none with room", pod: "podA", edit: func(p *monitorPlacement) {
			p.markClosed(small)
			p.assign(full, "b4", "podB")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := setup()
			if tc.edit != nil {
				tc.edit(p)
			}
			got, ok := p.reserve("new", tc.pod)
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
	dir := filepath.Join(t.TempDir(), "m")
	os.Mkdir(dir, 0o700)
	dead := monitorRef{PID: 1 << 30, StartTime: 1, JoinDir: dir}
	p := newMonitorPlacement(8)
	p.assign(dead, "a", "pod")
	p.assign(dead, "b", "pod")
	p.release("a")
	p.release("a") // twice: nothing more
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("join dir gone while the monitor still has a container: %v", err)
	}
	p.release("b")
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("join dir of a dead monitor after its last container: %v, want removed", err)
	}
	if len(p.monitors) != 0 {
		t.Errorf("an empty monitor is still placed: %+v", p.monitors)
	}
}
