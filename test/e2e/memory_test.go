//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"testing"
)

// TestDaemonMemoryLevers checks, without timing anything, the two runtime
// levers of the daemon's memory at 100 pods (docs/performance.md): the
// collector's target is GOGC=50 unless the environment sets one, from the
// start on, and a running container costs the daemon no goroutine of its own (its exit is
// watched by the one goroutine of conmon/watch.go; there were two per
// container).
func TestDaemonMemoryLevers(t *testing.T) {
	addr := freeLoopbackAddr(t)
	e := newExecEnv(t, WithArgs("--metrics-address", addr))
	url := "http://" + addr + "/metrics"
	e.sleeper(t, "first")
	// In force from the first line (cmd/minicri/gc.go): the start has no
	// collector setting of its own.
	before := httpGet(t, url)
	if got := metricValue(t, before, "go_gc_gogc_percent"); got != 50 {
		t.Errorf("go_gc_gogc_percent = %v with GOGC unset, want 50", got)
	}
	const more = 6
	for i := 0; i < more; i++ {
		e.sleeper(t, fmt.Sprintf("more%d", i))
	}
	after := httpGet(t, url)
	grown := metricValue(t, after, "go_goroutines") - metricValue(t, before, "go_goroutines")
	if grown >= more {
		t.Errorf("%d more running containers took %v more goroutines, want fewer than one each", more, grown)
	}
}

// TestDaemonGOGCFromTheEnvironment: the daemon's default is in force as
// soon as it serves (its start has no collector setting of its own), and
// an operator's GOGC wins over it.
func TestDaemonGOGCFromTheEnvironment(t *testing.T) {
	for _, tc := range []struct {
		gogc string // "" leaves GOGC unset
		want float64
	}{{"", 50}, {"100", 100}} {
		t.Run("GOGC="+tc.gogc, func(t *testing.T) {
			if v, set := os.LookupEnv("GOGC"); set {
				t.Setenv("GOGC", v) // restored after the test
				os.Unsetenv("GOGC")
			}
			if tc.gogc != "" {
				t.Setenv("GOGC", tc.gogc)
			}
			addr := freeLoopbackAddr(t)
			StartDaemon(t, WithArgs("--metrics-address", addr))
			if got := metricValue(t, httpGet(t, "http://"+addr+"/metrics"), "go_gc_gogc_percent"); got != tc.want {
				t.Errorf("go_gc_gogc_percent = %v right after the start with GOGC=%q, want %v", got, tc.gogc, tc.want)
			}
		})
	}
}
