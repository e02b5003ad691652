//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// kernelFeatEnv is kernelfeat.ForceEnv: the suite's daemon takes the named
// probes' answers instead of this kernel's.
const kernelFeatEnv = "MINICRI_TEST_KERNELFEAT"

// The daemon as Debian 12's kernel 6.1 makes it (no overlay "lowerdir+",
// no idmapped tmpfs), on this host: containers still run, on the classic
// overlay mount with the short relative layer links; crictl info says what
// the kernel lacks; no handler offers user namespaces, and a hostUsers:
// false pod is refused at once with FailedPrecondition. On main every
// container failed there ('overlay create: invalid argument') and the
// pods in a user namespace failed in runc.
func TestDaemonOnAnOlderKernel(t *testing.T) {
	requireCrashPoints(t) // the same test-only build carries the forcing
	t.Setenv(kernelFeatEnv, "overlayLowerdirPlus=no,idmappedTmpfs=no")
	d := StartDaemon(t)
	t.Setenv(kernelFeatEnv, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	resp, err := d.Runtime.Status(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	var feats map[string]string
	if err := json.Unmarshal([]byte(resp.GetInfo()["kernelFeatures"]), &feats); err != nil {
		t.Fatalf("crictl info kernelFeatures %q: %v", resp.GetInfo()["kernelFeatures"], err)
	}
	for name, want := range map[string]string{"overlayLowerdirPlus": "no: ", "idmappedTmpfs": "no: ", "idmappedOverlay": "yes"} {
		if !strings.HasPrefix(feats[name], want) {
			t.Errorf("kernelFeatures[%s] = %q, want %q…", name, feats[name], want)
		}
	}
	for _, h := range resp.GetRuntimeHandlers() {
		if h.GetFeatures().GetUserNamespaces() {
			t.Errorf("handler %q offers user namespaces on a kernel without idmapped tmpfs", h.GetName())
		}
	}

	ref := busyboxRef(t)
	d.pull(t, ref)
	d.bridgeNetwork(t)
	podCfg := d.podConfig("old-kernel")
	pod := d.runPod(t, podCfg)
	st, log := d.runToExit(t, pod, podCfg, containerConfig("hello", ref, "sh", "-c", "echo hello; cat /proc/self/mountinfo"))
	if st.GetExitCode() != 0 || !strings.HasPrefix(log, "hello\n") {
		t.Fatalf("container on the classic overlay mount: exit %d, log %q", st.GetExitCode(), log)
	}
	// The overlay the daemon made, as the host's mount table shows it: its
	// lower dirs are the store's relative short links.
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	classic := false
	for _, line := range strings.Split(string(mi), "\n") {
		if strings.Contains(line, " - overlay ") && strings.Contains(line, d.Root) && strings.Contains(line, "lowerdir=l/") {
			classic = true
		}
	}
	if !classic && !strings.Contains(log, "lowerdir=l/") {
		t.Errorf("no overlay with lowerdir=l/… (the classic mount's relative links); the container saw:\n%s", log)
	}

	_, err = d.Runtime.RunPodSandbox(ctx, d.usernsPodConfig("old-kernel-userns"), "")
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "idmappedTmpfs") {
		t.Fatalf("RunPodSandbox with hostUsers: false = %v, want FailedPrecondition naming idmappedTmpfs", err)
	}
}

// The daemon as Debian 11's kernel 5.10 makes it, where mount_setattr
// (5.12) is missing: runc still lists rro, but no handler offers recursive
// read-only mounts to the kubelet, and a container asking for one is
// refused at CreateContainer with the kernel named, instead of failing in
// runc. Before, Status offered them on the runtime's word alone.
func TestDaemonOnAKernelWithoutRecursiveReadOnly(t *testing.T) {
	requireCrashPoints(t)
	t.Setenv(kernelFeatEnv, "recursiveReadOnly=no")
	d := StartDaemon(t)
	t.Setenv(kernelFeatEnv, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := d.Runtime.Status(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	var feats map[string]string
	if err := json.Unmarshal([]byte(resp.GetInfo()["kernelFeatures"]), &feats); err != nil || !strings.HasPrefix(feats["recursiveReadOnly"], "no: ") {
		t.Errorf("kernelFeatures[recursiveReadOnly] = %q (%v), want no", feats["recursiveReadOnly"], err)
	}
	for _, h := range resp.GetRuntimeHandlers() {
		if h.GetFeatures().GetRecursiveReadOnlyMounts() {
			t.Errorf("handler %q offers recursive read-only mounts on a kernel without them", h.GetName())
		}
	}
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("no-rro")
	pod := d.runPod(t, podCfg)
	cfg := containerConfig("rro", ref, "true")
	cfg.Mounts = []*runtime.Mount{{ContainerPath: "/data", HostPath: t.TempDir(), Readonly: true, RecursiveReadOnly: true}}
	_, err = d.Runtime.CreateContainer(ctx, pod, cfg, podCfg)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "recursiveReadOnly") {
		t.Fatalf("CreateContainer with a recursive read-only mount = %v, want InvalidArgument naming the kernel's recursiveReadOnly", err)
	}
}
