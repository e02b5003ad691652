//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestDaemonMemoryLevers checks, without timing anything, the two runtime
// levers of the daemon's memory at 100 pods (docs/performance.md): the
// collector's target is GOGC=50 unless the environment sets one (from a
// second after the start), and a
// running container costs the daemon no goroutine of its own (its exit is
// watched by the one goroutine of conmon/watch.go; there were two per
// container).
func TestDaemonMemoryLevers(t *testing.T) {
	addr := freeLoopbackAddr(t)
	e := newExecEnv(t, WithArgs("--metrics-address", addr))
	url := "http://" + addr + "/metrics"
	e.sleeper(t, "first")
	// The start runs without collection; the target applies a second
	// after the daemon serves (cmd/minicri/gc.go).
	var before string
	waitFor(t, "go_gc_gogc_percent 50 (GOGC unset) once the daemon serves", 30*time.Second, func() bool {
		before = httpGet(t, url)
		return metricValue(t, before, "go_gc_gogc_percent") == 50
	})
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

// TestDaemonGOGCFromTheEnvironment: an operator's GOGC wins over the
// daemon's default.
func TestDaemonGOGCFromTheEnvironment(t *testing.T) {
	t.Setenv("GOGC", "100")
	addr := freeLoopbackAddr(t)
	StartDaemon(t, WithArgs("--metrics-address", addr))
	if got := metricValue(t, httpGet(t, "http://"+addr+"/metrics"), "go_gc_gogc_percent"); got != 100 {
		t.Errorf("go_gc_gogc_percent = %v with GOGC=100 in the environment, want 100", got)
	}
}
