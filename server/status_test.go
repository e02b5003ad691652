package server

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/internal/kernelfeat"
	"github.com/minicri/minicri/network"
)

func conditions(t *testing.T, s *Server) map[string]*runtime.RuntimeCondition {
	t.Helper()
	resp, err := s.Status(context.Background(), &runtime.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*runtime.RuntimeCondition{}
	for _, c := range resp.GetStatus().GetConditions() {
		out[c.GetType()] = c
	}
	return out
}

// runtimeScript is a runtime binary whose `features` says nothing. Not the
// test binary itself: Status runs `features`, and the test binary would
// run every test again, its children too.
func runtimeScript(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "runc")
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho '{}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestStatusRuntimeReadyFollowsTheBinaries(t *testing.T) {
	self := runtimeScript(t)
	missing := filepath.Join(t.TempDir(), "no-such-runc")
	cases := []struct {
		name, runtimePath, monitor string
		wantReason, wantInMessage  string
	}{
		{"all there", self, self, "", ""},
		{"runtime missing", missing, self, "RuntimeBinaryNotFound", "runtime.handlers.runc.path"},
		{"runtime not in PATH", "no-such-runtime-in-path", self, "RuntimeBinaryNotFound", "no-such-runtime-in-path"},
		{"monitor missing", self, missing, "MonitorBinaryNotFound", "runtime.monitor_path"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newRecordsServer(t)
			s.cfg = config.Default()
			s.cfg.Runtime.Handlers = map[string]config.RuntimeHandler{"runc": {Path: c.runtimePath}}
			s.monitorPath = c.monitor
			s.useRuntimes()
			s.useCNI(network.NewCNI(t.TempDir(), nil, t.TempDir(), nil))
			got := conditions(t, s)[runtime.RuntimeReady]
			if c.wantReason == "" {
				if !got.GetStatus() {
					t.Fatalf("RuntimeReady = %v, want true", got)
				}
				return
			}
			if got.GetStatus() || got.GetReason() != c.wantReason || !strings.Contains(got.GetMessage(), c.wantInMessage) {
				t.Fatalf("RuntimeReady = %v, want false, reason %s, message naming %q", got, c.wantReason, c.wantInMessage)
			}
		})
	}
}

// A runtime installed after the daemon started makes it ready without a
// restart, and is then found by the calls that run it.
func TestStatusRuntimeReadyOnceTheBinaryAppears(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "runc")
	s := newRecordsServer(t)
	s.cfg = config.Default()
	s.cfg.Runtime.Handlers = map[string]config.RuntimeHandler{"runc": {Path: bin}}
	s.monitorPath, _ = os.Executable()
	s.useRuntimes()
	s.useCNI(network.NewCNI(t.TempDir(), nil, t.TempDir(), nil))
	rt, _ := s.runtimes.Get("")
	if _, err := rt.Binary(); err == nil {
		t.Fatal("Binary found a runtime that is not there")
	}
	if conditions(t, s)[runtime.RuntimeReady].GetStatus() {
		t.Fatal("RuntimeReady true with no runtime binary")
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if c := conditions(t, s)[runtime.RuntimeReady]; !c.GetStatus() {
		t.Fatalf("RuntimeReady = %v after the binary appeared, want true", c)
	}
	if got, err := rt.Binary(); err != nil || got != bin {
		t.Fatalf("Binary = %q, %v after the binary appeared; want %s", got, err, bin)
	}
}

func TestStatusNetworkReadyNeedsALoadableCNIConfig(t *testing.T) {
	confDir := t.TempDir()
	s := newRecordsServer(t)
	s.cfg = config.Default()
	s.runtimes = ociHandlers{runtimeHandlers(s.cfg, "")}
	s.useCNI(network.NewCNI(confDir, nil, t.TempDir(), nil))
	c := conditions(t, s)[runtime.NetworkReady]
	if c.GetStatus() || c.GetReason() != "NetworkPluginNotReady" || !strings.Contains(c.GetMessage(), confDir) {
		t.Fatalf("NetworkReady with an empty conf dir = %v, want false, NetworkPluginNotReady, naming %s", c, confDir)
	}
	if err := os.WriteFile(filepath.Join(confDir, "10-bad.conflist"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c := conditions(t, s)[runtime.NetworkReady]; c.GetStatus() || !strings.Contains(c.GetMessage(), "10-bad.conflist") {
		t.Fatalf("NetworkReady with a broken config = %v, want false naming the file", c)
	}
	conf := `{"cniVersion":"1.0.0","name":"t","plugins":[{"type":"loopback"}]}`
	if err := os.WriteFile(filepath.Join(confDir, "10-bad.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if c := conditions(t, s)[runtime.NetworkReady]; !c.GetStatus() {
		t.Fatalf("NetworkReady with a valid config = %v, want true", c)
	}
}

// Status's verbose info tells what the kernel probes found, so an operator
// sees why (say) user namespaces are off: on the guest's 6.1 the idmapped
// tmpfs is a "no", on this host a "yes"; both forced here.
func TestStatusReportsKernelFeatures(t *testing.T) {
	for _, c := range []struct {
		name      string
		supported bool
		want      string
	}{
		{"kernel 6.3 and later", true, `"yes"`},
		{"kernel before 6.3", false, `"no: MOUNT_ATTR_IDMAP: invalid argument"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer kernelfeat.IDMappedTmpfs.Force(c.supported, "MOUNT_ATTR_IDMAP: invalid argument")()
			s := newRuntimeConfigServer(t, t.TempDir(), t.TempDir(), "")
			resp, err := s.Status(context.Background(), &runtime.StatusRequest{Verbose: true})
			if err != nil {
				t.Fatal(err)
			}
			var feats map[string]string
			if err := json.Unmarshal([]byte(resp.GetInfo()["kernelFeatures"]), &feats); err != nil {
				t.Fatalf("Status info kernelFeatures %q: %v", resp.GetInfo()["kernelFeatures"], err)
			}
			if got, _ := json.Marshal(feats[kernelfeat.IDMappedTmpfs.Name]); string(got) != c.want {
				t.Errorf("kernelFeatures[%s] = %s, want %s (all: %v)", kernelfeat.IDMappedTmpfs.Name, got, c.want, feats)
			}
		})
	}
}

// Status lists a configured handler only when its runtime is installed:
// the default config names crun, which the guest (like most nodes) lacks,
// and listed it read as a handler with no features. One installed later
// shows up at the next Status.
func TestStatusListsOnlyInstalledHandlers(t *testing.T) {
	dir := t.TempDir()
	s := newRecordsServer(t)
	s.cfg = config.Default()
	s.cfg.Runtime.Handlers = map[string]config.RuntimeHandler{
		"runc": {Path: runtimeScript(t)},
		"crun": {Path: filepath.Join(dir, "crun")},
	}
	s.cfg.Runtime.DefaultHandler = "runc"
	s.useRuntimes()
	names := func() []string {
		var out []string
		for _, h := range s.runtimeHandlers() {
			out = append(out, h.GetName())
		}
		return out
	}
	if got := names(); !slices.Equal(got, []string{"", "runc"}) {
		t.Errorf("handlers %q, want the default and runc (crun is not installed)", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "crun"), []byte("#!/bin/sh\necho '{}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := names(); !slices.Equal(got, []string{"", "crun", "runc"}) {
		t.Errorf("handlers %q after crun was installed, want it listed", got)
	}
}
