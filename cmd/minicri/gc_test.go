package main

import (
	"os"
	"runtime/debug"
	"testing"
)

// Without GOGC the daemon collects at defaultGCPercent from its first
// line; an operator's GOGC stays in force.
func TestSetGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	if v, set := os.LookupEnv("GOGC"); set {
		t.Setenv("GOGC", v) // restored after the test
		os.Unsetenv("GOGC")
	}
	for _, tt := range []struct {
		name string
		gogc string // "" for unset
		want int
	}{
		{"no environment", "", defaultGCPercent},
		{"GOGC", "100", 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.gogc != "" {
				t.Setenv("GOGC", tt.gogc)
			}
			debug.SetGCPercent(100) // as the runtime starts with GOGC unset or 100
			setGCPercent()
			got := debug.SetGCPercent(100)
			if got != tt.want {
				t.Errorf("GC percent %d, want %d", got, tt.want)
			}
		})
	}
}
