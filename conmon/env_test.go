package conmon

import (
	"slices"
	"testing"
)

// A monitor's runtime is sized before its main runs: one P and no heap
// profile sampling come from its environment.
func TestMonitorEnvSizesTheRuntime(t *testing.T) {
	env := monitorEnv()
	for _, want := range []string{"GOMAXPROCS=1", "GODEBUG=memprofilerate=0"} {
		if !slices.Contains(env, want) {
			t.Errorf("monitor environment %q lacks %s", env, want)
		}
	}
}
