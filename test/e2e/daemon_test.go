//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestVersionThroughKubeletClient(t *testing.T) {
	d := StartDaemon(t)
	v, err := d.Runtime.Version(context.Background(), "v1")
	if err != nil {
		t.Fatal(err)
	}
	if v.GetRuntimeName() != "minicri" || v.GetRuntimeApiVersion() != "v1" || v.GetRuntimeVersion() == "" {
		t.Fatalf("Version = %+v, want runtime minicri, API v1 and a version", v)
	}
	// The kubelet parses it, and shows the node's runtime as "Unknown" when it
	// cannot.
	if _, err := utilversion.ParseSemantic(v.GetRuntimeVersion()); err != nil {
		t.Errorf("RuntimeVersion %q is no semantic version: %v", v.GetRuntimeVersion(), err)
	}
}

func TestStatusReportsConditions(t *testing.T) {
	d := StartDaemon(t)
	ctx := context.Background()
	resp, err := d.Runtime.Status(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	conditions := map[string]*runtime.RuntimeCondition{}
	for _, c := range resp.GetStatus().GetConditions() {
		conditions[c.GetType()] = c
	}
	if c := conditions[runtime.RuntimeReady]; !c.GetStatus() {
		t.Errorf("RuntimeReady = %+v, want true", c)
	}
	// The daemon's CNI conf dir is empty: the network cannot be ready, and it must say why.
	if c := conditions[runtime.NetworkReady]; c.GetStatus() || c.GetReason() == "" || !strings.Contains(strings.ToLower(c.GetMessage()), "cni") {
		t.Errorf("NetworkReady = %+v, want false with a reason naming CNI", c)
	}
	var cfg struct{ Root string }
	if err := json.Unmarshal([]byte(resp.GetInfo()["config"]), &cfg); err != nil || cfg.Root != d.Root {
		t.Errorf("verbose info config root = %q (%v), want %q", cfg.Root, err, d.Root)
	}

	// A CNI config appearing later makes the network ready without a restart.
	confDir := filepath.Join(d.Dir, "cni")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := `{"cniVersion":"1.0.0","cniVersions":["0.4.0","1.0.0"],"name":"e2e","plugins":[{"type":"loopback"}]}`
	if err := os.WriteFile(filepath.Join(confDir, "10-e2e.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	resp, err = d.Runtime.Status(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range resp.GetStatus().GetConditions() {
		if c.GetType() == runtime.NetworkReady && !c.GetStatus() {
			t.Errorf("NetworkReady still false after a CNI config was added: %+v", c)
		}
	}
}

// TestCgroupDriverFollowsTheNode: with cgroup_driver unset the daemon
// detects the driver, on this host (systemd is not PID 1) cgroupfs, and
// says so to the kubelet (RuntimeConfig), in crictl info and in its log.
func TestCgroupDriverFollowsTheNode(t *testing.T) {
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("systemd is PID 1 here; the guest stage tests the systemd side (TestGuestNode)")
	}
	d := StartDaemon(t)
	ctx := context.Background()
	resp, err := d.Runtime.RuntimeConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetLinux().GetCgroupDriver(); got != runtime.CgroupDriver_CGROUPFS {
		t.Errorf("RuntimeConfig: cgroup driver %v, want CGROUPFS, detected on a host without systemd", got)
	}
	st, err := d.Runtime.Status(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	var driver struct{ Driver, Source, Reason string }
	if err := json.Unmarshal([]byte(st.GetInfo()["cgroupDriver"]), &driver); err != nil {
		t.Fatalf("Status info cgroupDriver %q: %v", st.GetInfo()["cgroupDriver"], err)
	}
	if driver.Driver != "cgroupfs" || driver.Source != "detected" || !strings.Contains(driver.Reason, "systemd is not PID 1") {
		t.Errorf("Status info cgroupDriver = %+v, want cgroupfs, detected, because systemd is not PID 1", driver)
	}
	var cfg struct{ CgroupDriver string }
	if err := json.Unmarshal([]byte(st.GetInfo()["config"]), &cfg); err != nil || cfg.CgroupDriver != "cgroupfs" {
		t.Errorf("Status info config: cgroup driver %q (%v), want the driver in force, cgroupfs", cfg.CgroupDriver, err)
	}
	if log := d.Output(); !regexp.MustCompile(`(?m)msg="cgroup driver".* driver=cgroupfs .*source=detected`).MatchString(log) {
		t.Errorf("the start log does not say the driver was detected as cgroupfs:\n%s", log)
	}
	// minicri config (what make install writes) leaves the key unset and
	// says what unset means here.
	if code, out := runMinicri(t, "config"); code != 0 || !strings.Contains(out, "\n# cgroup_driver = \"cgroupfs\"\n") ||
		!strings.Contains(out, "unset means cgroupfs: systemd is not PID 1") {
		t.Errorf("minicri config: exit %d, want cgroup_driver commented out with what unset means here:\n%s", code, out)
	}
}

// TestSystemdCgroupDriverWithoutSystemdIsRefused: an explicit systemd
// where systemd is not PID 1 stops the start, saying why, before the CRI
// socket is made; the explicit cgroupfs still wins over detection.
func TestSystemdCgroupDriverWithoutSystemdIsRefused(t *testing.T) {
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("systemd is PID 1 here: cgroup_driver = systemd works")
	}
	for _, c := range []struct {
		name string
		opt  DaemonOption
	}{
		{"file", WithConfig("cgroup_driver = \"systemd\"\n")},
		{"flag", WithArgs("--cgroup-driver", "systemd")},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := NewDaemon(t, c.opt)
			code, out := runMinicri(t, d.args...)
			if code != 1 || !strings.Contains(out, `"cgroup_driver"`) || !strings.Contains(out, "systemd is not PID 1") {
				t.Fatalf("exit %d, output %q; want exit 1 naming cgroup_driver and that systemd is not PID 1", code, out)
			}
			if _, err := os.Stat(d.Socket); !os.IsNotExist(err) {
				t.Fatalf("a socket was created by a daemon that refused its cgroup driver")
			}
		})
	}
	d := StartDaemon(t, WithArgs("--cgroup-driver", "cgroupfs"))
	st, err := d.Runtime.Status(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetInfo()["cgroupDriver"]; !strings.Contains(got, `"source":"configured"`) || !strings.Contains(got, `"driver":"cgroupfs"`) {
		t.Errorf("Status info cgroupDriver with --cgroup-driver cgroupfs = %s, want cgroupfs, configured", got)
	}
}

func TestUnbuiltRPCIsUnimplemented(t *testing.T) {
	d := StartDaemon(t)
	err := d.Runtime.CheckpointPod(context.Background(), &runtime.CheckpointPodRequest{PodSandboxId: "x", OutputPath: "/tmp/x"})
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "CheckpointPod") {
		t.Fatalf("CheckpointPod error = %v, want Unimplemented naming the RPC", err)
	}
}

func TestSecondDaemonOnSameRootRefuses(t *testing.T) {
	d := StartDaemon(t)
	code, out := runMinicri(t, "--root", d.Root, "--run-dir", d.RunDir, "--listen", filepath.Join(d.Dir, "other.sock"))
	if code != 1 || !strings.Contains(out, "another minicri") || !strings.Contains(out, d.Root) {
		t.Fatalf("second daemon: exit %d, output %q; want exit 1 naming the held root", code, out)
	}
	// The first daemon still serves.
	if _, err := d.Runtime.Version(context.Background(), "v1"); err != nil {
		t.Fatalf("first daemon stopped answering: %v", err)
	}
}

func TestSIGTERMExitsCleanly(t *testing.T) {
	d := StartDaemon(t)
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(15 * time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0\n%s", code, d.Output())
	}
	if _, err := os.Stat(d.Socket); !os.IsNotExist(err) {
		t.Fatalf("socket still there after SIGTERM: %v", err)
	}
}

func TestStaleSocketIsReplaced(t *testing.T) {
	d := NewDaemon(t)
	if err := os.WriteFile(d.Socket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d.Start()
	fi, err := os.Stat(d.Socket)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket = %v, %v; want the stale file replaced by a socket", fi, err)
	}
	if perm := fi.Mode().Perm(); perm != 0o660 {
		t.Errorf("socket mode = %o, want 660", perm)
	}
}

func TestBadConfigStopsStartup(t *testing.T) {
	cases := []struct {
		name, file string
		args       []string
		want       string
	}{
		{"unknown key", "log_levle = \"debug\"\n", nil, "log_levle"},
		{"bad value", "cgroup_driver = \"nope\"\n", nil, "cgroup_driver"},
		{"bad flag value", "", []string{"--log-level", "loud"}, "log_level"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := NewDaemon(t, WithConfig(c.file), WithArgs(c.args...))
			code, out := runMinicri(t, d.args...)
			if code == 0 || !strings.Contains(out, c.want) {
				t.Fatalf("exit %d, output %q; want failure naming %s", code, out, c.want)
			}
			if _, err := os.Stat(d.Socket); !os.IsNotExist(err) {
				t.Fatalf("a socket was created by a daemon that refused its config")
			}
		})
	}
}

func TestConfigCommandPrintsLoadableDefaults(t *testing.T) {
	code, out := runMinicri(t, "config")
	if code != 0 || !strings.Contains(out, "listen = \"/run/minicri/minicri.sock\"") || !strings.Contains(out, "# ") {
		t.Fatalf("minicri config: exit %d\n%s", code, out)
	}
	path := filepath.Join(t.TempDir(), "minicri.toml")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := runMinicri(t, "config", "--config", path); code != 0 {
		t.Fatalf("printed config does not load back: exit %d\n%s", code, out)
	}
	if code, out := runMinicri(t, "--help"); code != 0 || !strings.Contains(out, "--run-dir") {
		t.Fatalf("minicri --help: exit %d\n%s", code, out)
	}
}
