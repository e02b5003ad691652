package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// buildTags are make build's (the Makefile's GOTAGS without NRI_WASM).
const buildTags = "grpcnotrace,nri_no_wasm"

// goList runs go list with args in this package's directory.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.Fields(string(out))
}

// TestBuildTagsAreMakeBuilds: buildTags, which the tests below check the
// effect of, are the tags make build passes.
func TestBuildTagsAreMakeBuilds(t *testing.T) {
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(makefile), "\n") {
		if !strings.HasPrefix(line, "GOTAGS") {
			continue
		}
		for _, tag := range strings.Split(buildTags, ",") {
			if !strings.Contains(line, tag) {
				t.Errorf("the Makefile's %q does not pass %s", line, tag)
			}
		}
		return
	}
	t.Fatal("the Makefile sets no GOTAGS")
}

// TestDaemonLeavesOutHeavyPackages: every linked package costs the daemon
// memory, its init and its part of the binary's pages being mapped at
// start. grpc's request tracing (off unless grpc.EnableTracing, which
// minicri never calls) and the html/template it pulls in are linked for
// nothing; grpcnotrace leaves them out.
func TestDaemonLeavesOutHeavyPackages(t *testing.T) {
	deps := goList(t, "-deps", "-tags", buildTags, ".")
	if !slices.Contains(deps, "google.golang.org/grpc") {
		t.Fatalf("go list -deps lists no grpc; the list is not the daemon's:\n%s", deps)
	}
	for _, p := range []string{"golang.org/x/net/trace", "html/template"} {
		if slices.Contains(deps, p) {
			t.Errorf("the daemon links %s (go list -deps -tags %s ./cmd/minicri)", p, buildTags)
		}
	}
}

// TestBuildTagsLeaveOutFiles: the shipped daemon has no crash points (a
// test-only way to kill it from its environment), only the e2e build's
// crashpoints tag brings them in; and NRI's WASM plugin runtime is left out
// unless make build NRI_WASM=1 asks for it. A file, not a package, is what
// each tag chooses, so the check is on the files go would compile.
func TestBuildTagsLeaveOutFiles(t *testing.T) {
	for _, tc := range []struct {
		tags, pkg, want, notWant string
	}{
		{buildTags, "github.com/minicri/minicri/server/internal/lifecycle", "crashpoint_off.go", "crashpoint.go"},
		{"crashpoints," + buildTags, "github.com/minicri/minicri/server/internal/lifecycle", "crashpoint.go", "crashpoint_off.go"},
		{buildTags, "github.com/containerd/nri/pkg/adaptation", "wasm-disabled.go", "wasm-enabled.go"},
		{"grpcnotrace", "github.com/containerd/nri/pkg/adaptation", "wasm-enabled.go", "wasm-disabled.go"},
	} {
		files := goList(t, "-tags", tc.tags, "-f", `{{join .GoFiles " "}}`, tc.pkg)
		if !slices.Contains(files, tc.want) || slices.Contains(files, tc.notWant) {
			t.Errorf("with -tags %s, %s compiles %v; want %s and not %s", tc.tags, tc.pkg, files, tc.want, tc.notWant)
		}
	}
}
