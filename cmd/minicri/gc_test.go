package main

import (
	"math"
	"os"
	"runtime/debug"
	"testing"
)

// The start collects nothing, under a memory limit; settle puts the
// serving target in force and lifts the limit. An operator's GOGC or
// GOMEMLIMIT turns the start's own off.
func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))

	for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
		if v, set := os.LookupEnv(k); set {
			t.Setenv(k, v) // restored after the test
			os.Unsetenv(k)
		}
	}
	settle := tuneGC()
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Errorf("GC percent during the start = %d, want off (-1)", p)
	}
	if l := debug.SetMemoryLimit(-1); l != startMemoryLimit {
		t.Errorf("memory limit during the start = %d, want %d", l, startMemoryLimit)
	}
	settle()
	if p := debug.SetGCPercent(defaultGCPercent); p != defaultGCPercent {
		t.Errorf("GC percent once serving = %d, want %d", p, defaultGCPercent)
	}
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		t.Errorf("memory limit once serving = %d, want none", l)
	}

	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetGCPercent(100)
	tuneGC()()
	if p := debug.SetGCPercent(-1); p != defaultGCPercent {
		t.Errorf("GC percent with GOMEMLIMIT in the environment = %d, want %d from the start", p, defaultGCPercent)
	}
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		t.Errorf("memory limit with GOMEMLIMIT in the environment = %d, want the environment's (none in this test's runtime)", l)
	}

	t.Setenv("GOGC", "100")
	debug.SetGCPercent(100)
	tuneGC()()
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("GC percent with GOGC=100 in the environment = %d, want 100", p)
	}
}
