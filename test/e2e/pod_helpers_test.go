//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// cgroupParent is the cgroup every test pod is placed under, removed at the
// end of the suite, so that a container left behind shows as a cgroup that
// cannot be removed.
var cgroupParent = "/" + strings.TrimSuffix(tmpPrefix, "-")

// cgroupParent is the part of the suite's cgroup parent that holds this
// daemon's pods (podConfig): its test checks that subtree for leaks, and
// one test's leak fails that test only. The end of the suite checks the
// whole parent.
func (d *Daemon) cgroupParent() string { return cgroupParent + "/" + filepath.Base(d.Dir) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// busyboxRef pushes the busybox test image to a registry of the test's own
// and returns its reference.
func busyboxRef(t *testing.T) string {
	t.Helper()
	reg := registry.Start(t, registry.Options{})
	ref := reg.Host() + "/e2e/busybox:latest"
	testimage.Push(t, testimage.Busybox(t), ref)
	return ref
}

// pull pulls ref into the daemon, failing the test on error.
func (d *Daemon) pull(t *testing.T, ref string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := d.Images.PullImage(ctx, &runtime.ImageSpec{Image: ref}, nil, nil)
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	return id
}

// bridgeNetwork gives the daemon a CNI bridge network of its own (see
// writeBridgeNetwork), without masquerading. When the test ends, after its
// pods are removed, no IP address may still be allocated.
func (d *Daemon) bridgeNetwork(t *testing.T) (subnet string) {
	t.Helper()
	_, subnet = d.writeBridgeNetwork(t, false)
	t.Cleanup(func() {
		// Runs after the test's pods are removed (cleanups run last-in first-out).
		if ips := reservedIPs(filepath.Join(d.Dir, "ipam")); len(ips) > 0 {
			t.Errorf("IP addresses still allocated after the pods were removed: %v", ips)
		}
	})
	return subnet
}

// writeBridgeNetwork writes the daemon's CNI conflist: a unique bridge and
// /24 subnet, masquerading as ipMasq says, host-local IPAM state in the
// test's dir, and portmap. The bridge is deleted when the test ends.
func (d *Daemon) writeBridgeNetwork(t *testing.T, ipMasq bool) (conf []byte, subnet string) {
	t.Helper()
	bridge := "mcbr" + randomHex(4)
	n := func(s string) int { var v int; fmt.Sscanf(s, "%x", &v); return v }
	subnet = fmt.Sprintf("10.%d.%d.0/24", 200+n(randomHex(1))%50, n(randomHex(1)))
	conf = []byte(fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "cniVersions": ["0.4.0", "1.0.0"],
  "name": "e2e-%s",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": %t,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}`, bridge, bridge, ipMasq, filepath.Join(d.Dir, "ipam"), subnet))
	dir := filepath.Join(d.Dir, "cni")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "10-e2e.conflist"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", bridge).Run() })
	return conf, subnet
}

// reservedIPs lists the addresses host-local IPAM still holds under dir.
func reservedIPs(dir string) []string {
	var ips []string
	_ = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() && net.ParseIP(e.Name()) != nil {
			ips = append(ips, e.Name())
		}
		return nil
	})
	return ips
}

// podConfig is a pod config with unique metadata, its logs in the test's dir.
func (d *Daemon) podConfig(name string) *runtime.PodSandboxConfig {
	uid := randomHex(8)
	return &runtime.PodSandboxConfig{
		Metadata:     &runtime.PodSandboxMetadata{Name: name, Namespace: "e2e", Uid: uid},
		Hostname:     name,
		LogDirectory: filepath.Join(d.Dir, "logs", uid),
		Linux: &runtime.LinuxPodSandboxConfig{
			CgroupParent: d.cgroupParent() + "/pod" + uid,
		},
	}
}

// runPod runs a sandbox and removes it when the test ends.
func (d *Daemon) runPod(t *testing.T, cfg *runtime.PodSandboxConfig) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := d.Runtime.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		t.Fatalf("RunPodSandbox %s: %v", cfg.GetMetadata().GetName(), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		infra := d.infraProcess(t, id)
		if err := d.Runtime.StopPodSandbox(ctx, id); err != nil {
			t.Errorf("cleanup: StopPodSandbox: %v", err)
		}
		if err := d.Runtime.RemovePodSandbox(ctx, id); err != nil {
			t.Errorf("cleanup: RemovePodSandbox: %v", err)
		}
		// A zombie is gone as far as the pod is concerned: after a daemon
		// restart the infra process is the init process's to reap.
		if infra != 0 && processRunning(infra) {
			t.Errorf("the pod's infra process %d outlived the pod", infra)
		}
	})
	return id
}

// infraProcess is the pid of a pod's infra process, 0 when it has none (or
// the daemon is not answering).
func (d *Daemon) infraProcess(t *testing.T, podID string) int {
	resp, err := d.Runtime.PodSandboxStatus(context.Background(), podID, true)
	if err != nil {
		return 0
	}
	var info struct {
		Record struct{ Infra struct{ PID int } }
	}
	if json.Unmarshal([]byte(resp.GetInfo()["info"]), &info) != nil {
		return 0
	}
	return info.Record.Infra.PID
}

// containerConfig is a container config running cmd in the image, logging to NAME.log.
func containerConfig(name, image string, cmd ...string) *runtime.ContainerConfig {
	return &runtime.ContainerConfig{
		Metadata: &runtime.ContainerMetadata{Name: name},
		Image:    &runtime.ImageSpec{Image: image},
		Command:  cmd,
		LogPath:  name + ".log",
	}
}

// startContainer creates and starts a container.
func (d *Daemon) startContainer(t *testing.T, podID string, podCfg *runtime.PodSandboxConfig, cfg *runtime.ContainerConfig) string {
	t.Helper()
	id := d.createContainer(t, podID, podCfg, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Runtime.StartContainer(ctx, id); err != nil {
		t.Fatalf("StartContainer %s: %v", cfg.GetMetadata().GetName(), err)
	}
	return id
}

func (d *Daemon) createContainer(t *testing.T, podID string, podCfg *runtime.PodSandboxConfig, cfg *runtime.ContainerConfig) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := d.Runtime.CreateContainer(ctx, podID, cfg, podCfg)
	if err != nil {
		t.Fatalf("CreateContainer %s: %v", cfg.GetMetadata().GetName(), err)
	}
	return id
}

// status returns a container's status, failing the test on error.
func (d *Daemon) status(t *testing.T, id string) *runtime.ContainerStatus {
	t.Helper()
	resp, err := d.Runtime.ContainerStatus(context.Background(), id, false)
	if err != nil {
		t.Fatalf("ContainerStatus %s: %v", id, err)
	}
	return resp.GetStatus()
}

// waitExited waits for a container to exit and returns its status.
func (d *Daemon) waitExited(t *testing.T, id string, timeout time.Duration) *runtime.ContainerStatus {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := d.status(t, id)
		if st.GetState() == runtime.ContainerState_CONTAINER_EXITED {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s still %v after %s", id, st.GetState(), timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runToExit runs a container to its end and returns its status and log.
func (d *Daemon) runToExit(t *testing.T, podID string, podCfg *runtime.PodSandboxConfig, cfg *runtime.ContainerConfig) (*runtime.ContainerStatus, string) {
	t.Helper()
	id := d.startContainer(t, podID, podCfg, cfg)
	st := d.waitExited(t, id, 30*time.Second)
	return st, readLog(t, st.GetLogPath())
}

// readLog returns the message parts of a CRI log file, one line per full line.
func readLog(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read log: %v", err)
	}
	return parseLog(data)
}

// parseLog reassembles the messages of CRI log lines.
func parseLog(data []byte) string { return parseLogStream(data, "") }

// parseLogStream reassembles the messages of one stream ("stdout",
// "stderr"; "" for both, in file order).
func parseLogStream(data []byte, stream string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		parts := strings.SplitN(line, " ", 4)
		if len(parts) < 4 || (stream != "" && parts[1] != stream) {
			continue
		}
		b.WriteString(parts[3])
		if parts[2] == "F" {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	waitEvery(t, what, timeout, 20*time.Millisecond, cond)
}

// waitEvery is waitFor with another pause between two polls.
func waitEvery(t *testing.T, what string, timeout, every time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(every)
	}
}

// removeTestCgroups removes the suite's cgroup parent from every hierarchy,
// deepest first. What cannot be removed still holds a process: a leak.
func removeTestCgroups() []string {
	var leaks []string
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, root := range roots {
		top := filepath.Join(root, cgroupParent)
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
				leaks = append(leaks, fmt.Sprintf("cgroup %s: %v", dirs[i], err))
			}
		}
	}
	return leaks
}
