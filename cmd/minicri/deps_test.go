package main

import (
	"os/exec"
	"strings"
	"testing"
)

// buildTags are make build's (the Makefile's GOTAGS without NRI_WASM).
const buildTags = "grpcnotrace,nri_no_wasm"

// TestDaemonLeavesOutHeavyPackages: every linked package costs the daemon
// memory, its init and its part of the binary's pages being mapped at
// start. These are linked for nothing minicri uses: grpc's request tracing
// (off unless grpc.EnableTracing) with the html/template it pulls in. (NRI's
// WASM runtime is guarded by make build's grep instead: NRI's API package
// imports wazero's API, of which the linker keeps next to nothing.)
func TestDaemonLeavesOutHeavyPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", buildTags, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	if !deps["google.golang.org/grpc"] {
		t.Fatalf("go list -deps lists no grpc; the list is not the daemon's:\n%s", out)
	}
	for _, p := range []string{"golang.org/x/net/trace", "html/template"} {
		if deps[p] {
			t.Errorf("the daemon links %s (go list -deps -tags %s ./cmd/minicri)", p, buildTags)
		}
	}
}
