package server

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
)

// startConfig is a configuration New can start on in a temp dir, without
// runc, CNI or NRI.
func startConfig(t *testing.T) config.Config {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Root = filepath.Join(dir, "root")
	cfg.RunDir = filepath.Join(dir, "run")
	cfg.CNI.ConfDir = filepath.Join(dir, "cni")
	cfg.CDI.SpecDirs = []string{filepath.Join(dir, "cdi")}
	cfg.NRI.Enabled = false
	script := runtimeScript(t)
	cfg.Runtime.MonitorPath = script
	cfg.Runtime.Handlers = map[string]config.RuntimeHandler{"runc": {Path: script, Root: filepath.Join(dir, "run", "runtime", "runc")}}
	return cfg
}

// New decides the driver once, from the node it is handed, and every path
// then sees the driver in force: the kubelet's RuntimeConfig, the scopes
// of minicri's own processes, the runtimes' --systemd-cgroup, Status.
func TestNewResolvesTheCgroupDriverOnce(t *testing.T) {
	cases := []struct {
		name       string
		configured string
		node       config.Node
		want       runtime.CgroupDriver
		source     string
	}{
		{"unset where systemd is PID 1", "", config.Node{SystemdBooted: true}, runtime.CgroupDriver_SYSTEMD, config.Detected},
		{"unset without systemd", "", config.Node{}, runtime.CgroupDriver_CGROUPFS, config.Detected},
		{"cgroupfs given where systemd is PID 1", config.CgroupfsDriver, config.Node{SystemdBooted: true}, runtime.CgroupDriver_CGROUPFS, config.Configured},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := startConfig(t)
			cfg.CgroupDriver = c.configured
			s, err := New(Options{Config: cfg, Version: "test", Log: quietLog(), Node: &c.node})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			rc, err := s.RuntimeConfig(context.Background(), &runtime.RuntimeConfigRequest{})
			if err != nil || rc.GetLinux().GetCgroupDriver() != c.want {
				t.Fatalf("RuntimeConfig = %v, %v; want %v", rc, err, c.want)
			}
			systemd := c.want == runtime.CgroupDriver_SYSTEMD
			if got := s.scopes != nil; got != systemd {
				t.Errorf("scopes for minicri's own processes: %v, want %v", got, systemd)
			}
			rt, err := s.runtimes.Get("runc")
			if err != nil {
				t.Fatal(err)
			}
			if rt.SystemdCgroup() != systemd {
				t.Errorf("runtime --systemd-cgroup = %v, want %v", rt.SystemdCgroup(), systemd)
			}
			resp, err := s.Status(context.Background(), &runtime.StatusRequest{Verbose: true})
			if err != nil {
				t.Fatal(err)
			}
			var got config.CgroupDriverChoice
			if err := json.Unmarshal([]byte(resp.GetInfo()["cgroupDriver"]), &got); err != nil {
				t.Fatalf("Status info cgroupDriver %q: %v", resp.GetInfo()["cgroupDriver"], err)
			}
			if got.Driver != strings.ToLower(c.want.String()) || got.Source != c.source || got.Reason == "" {
				t.Errorf("Status info cgroupDriver = %+v, want %s, %s, with a reason", got, strings.ToLower(c.want.String()), c.source)
			}
			var inForce struct{ CgroupDriver string }
			if err := json.Unmarshal([]byte(resp.GetInfo()["config"]), &inForce); err != nil || inForce.CgroupDriver != got.Driver {
				t.Errorf("Status info config cgroup driver = %q (%v), want %q", inForce.CgroupDriver, err, got.Driver)
			}
		})
	}
}

// systemd on a node without it is refused before New makes anything,
// naming the key and the reason.
func TestNewRefusesSystemdDriverWithoutSystemd(t *testing.T) {
	cfg := startConfig(t)
	cfg.CgroupDriver = config.SystemdDriver
	s, err := New(Options{Config: cfg, Version: "test", Log: quietLog(), Node: &config.Node{}})
	if err == nil {
		_ = s.Close()
		t.Fatal("New started with cgroup_driver = systemd on a node without systemd")
	}
	if !strings.Contains(err.Error(), "cgroup_driver") || !strings.Contains(err.Error(), "systemd is not PID 1") {
		t.Fatalf("New: %v; want the key and the reason named", err)
	}
}
