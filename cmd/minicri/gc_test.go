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
	none := int64(math.MaxInt64)
	tests := []struct {
		name           string
		env            [2]string // a variable and its value, or none
		startPercent   int
		startLimit     int64
		servingPercent int
		servingLimit   int64
	}{
		{"no environment", [2]string{}, -1, startMemoryLimit, defaultGCPercent, none},
		// The runtime of this test read no GOMEMLIMIT: "none" is the
		// environment's limit, left alone.
		{"GOMEMLIMIT", [2]string{"GOMEMLIMIT", "1GiB"}, defaultGCPercent, none, defaultGCPercent, none},
		{"GOGC", [2]string{"GOGC", "100"}, 100, none, 100, none},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env[0] != "" {
				t.Setenv(tt.env[0], tt.env[1])
			}
			debug.SetGCPercent(100) // as the runtime starts with GOGC unset or 100
			settle := tuneGC()
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
