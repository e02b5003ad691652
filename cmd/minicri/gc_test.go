package main

import (
	"math"
	"os"
	"runtime/debug"
	"testing"
)

// Without start_without_gc the target is in force from the first line;
// with it the start collects nothing, under a memory limit, until settle.
// An operator's GOGC or GOMEMLIMIT turns the start's own off.
func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
		if v, set := os.LookupEnv(k); set {
			t.Setenv(k, v) // restored after the test
			os.Unsetenv(k)
		}
	}
	none := int64(math.MaxInt64)
	tests := []struct {
		name           string
		startWithoutGC bool
		env            [2]string // a variable and its value, or none
		startPercent   int
		startLimit     int64
		servingPercent int
		servingLimit   int64
	}{
		{"default", false, [2]string{}, defaultGCPercent, none, defaultGCPercent, none},
		{"default, GOGC", false, [2]string{"GOGC", "100"}, 100, none, 100, none},
		{"start_without_gc", true, [2]string{}, -1, startMemoryLimit, defaultGCPercent, none},
		// The runtime of this test read no GOMEMLIMIT: "none" is the
		// environment's limit, left alone.
		{"start_without_gc, GOMEMLIMIT", true, [2]string{"GOMEMLIMIT", "1GiB"}, defaultGCPercent, none, defaultGCPercent, none},
		{"start_without_gc, GOGC", true, [2]string{"GOGC", "100"}, 100, none, 100, none},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env[0] != "" {
				t.Setenv(tt.env[0], tt.env[1])
			}
			debug.SetGCPercent(100) // as the runtime starts with GOGC unset or 100
			settle := tuneGC(tt.startWithoutGC)
			if p, l := gcNow(); p != tt.startPercent || l != tt.startLimit {
				t.Errorf("during the start: GC percent %d, limit %d; want %d, %d", p, l, tt.startPercent, tt.startLimit)
			}
			settle()
			if p, l := gcNow(); p != tt.servingPercent || l != tt.servingLimit {
				t.Errorf("once serving: GC percent %d, limit %d; want %d, %d", p, l, tt.servingPercent, tt.servingLimit)
			}
		})
	}
}

// gcNow reads the collector's target and the memory limit.
func gcNow() (percent int, limit int64) {
	percent = debug.SetGCPercent(-1)
	debug.SetGCPercent(percent)
	return percent, debug.SetMemoryLimit(-1)
}
