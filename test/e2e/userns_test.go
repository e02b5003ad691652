//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// usernsHandler is the handler whose runc can idmap mounts (make deps
// builds it, hack/build-runc.sh).
const usernsHandler = "runc-current"

// currentRunc is the binary of handler runc-current, as hack/build-runc.sh
// installs it.
const currentRunc = "/usr/local/lib/minicri/runc-v1.5.2/runc"

// usernsHostID is where the test pods' IDs start on the host: far above
// any real user, a multiple of 65536 as the kubelet picks them.
const usernsHostID = 3 << 20

// usernsPodConfig is a pod config asking for a user namespace of its own
// with 65536 IDs from usernsHostID, as the kubelet sends for hostUsers: false.
func (d *Daemon) usernsPodConfig(name string) *runtime.PodSandboxConfig {
	cfg := d.podConfig(name)
	cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtime.NamespaceOption{
			Pid:           runtime.NamespaceMode_CONTAINER,
			UsernsOptions: usernsOptions(),
		},
	}
	return cfg
}

func usernsOptions() *runtime.UserNamespace {
	m := func() []*runtime.IDMapping {
		return []*runtime.IDMapping{{ContainerId: 0, HostId: usernsHostID, Length: 65536}}
	}
	return &runtime.UserNamespace{Mode: runtime.NamespaceMode_POD, Uids: m(), Gids: m()}
}

// defaultRunc is the binary of the handler a daemon with the default
// handlers runs pods on: the current runc where make deps built it (it can
// idmap mounts, which Debian's runc cannot), else Debian's runc in PATH.
func defaultRunc() string {
	if _, err := os.Stat(currentRunc); err == nil {
		return currentRunc
	}
	return "runc"
}

func requireCurrentRunc(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(currentRunc); err != nil {
		t.Fatalf("the runc of handler %s is missing (%v): run make deps", usernsHandler, err)
	}
}

// Status says which handler can run a pod in a user namespace: the current
// runc, not Debian's runc 1.1.5 nor crun 1.8, which cannot idmap mounts; and
// the default handler (""), which is the current runc where make deps built
// it, so that the kubelet lets a pod without a RuntimeClass have hostUsers:
// false.
func TestStatusUserNamespacesForCurrentRuncAndTheDefault(t *testing.T) {
	requireCurrentRunc(t)
	d := StartDaemon(t)
	resp, err := d.Runtime.Status(context.Background(), true) // verbose, as crictl info asks
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	got := map[string]bool{}
	for _, h := range resp.GetRuntimeHandlers() {
		got[h.GetName()] = h.GetFeatures().GetUserNamespaces()
	}
	want := map[string]bool{"": true, "runc": false, "crun": false, usernsHandler: true}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("handler %q: user_namespaces = %v (listed %v), want %v; all: %v", name, g, ok, w, got)
		}
	}
	// crictl info prints the handlers as encoding/json does: a feature
	// that is false is left out.
	printed, err := json.Marshal(resp.GetRuntimeHandlers())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(printed), `"user_namespaces":true`); n != 2 || !strings.Contains(string(printed), `{"name":"runc-current","features":{`) {
		t.Errorf("crictl info would show %s: want user_namespaces twice, for the default and runc-current", printed)
	}
	if got := resp.GetInfo()["defaultRuntimeHandler"]; got != `"`+usernsHandler+`"` {
		t.Errorf("crictl info shows defaultRuntimeHandler %s, want %q", got, usernsHandler)
	}
	t.Logf("runtimeHandlers as crictl info shows them: %s", printed)
}

// A pod with hostUsers: false on the current runc: its containers see the
// kubelet's mappings in /proc/self/uid_map, the image's files and a volume
// owned by root on the host as owned by root, and what they write to the
// volume is stored with the host's IDs of the volume (idmapped mounts).
func TestUserNamespacePodSeesItsMappingsAndOwnsItsFiles(t *testing.T) {
	d, ref := startUsernsDaemon(t)

	vol := t.TempDir() // owned by root on the host
	cfg := d.usernsPodConfig("userns")
	podID := d.runPodOn(t, cfg, usernsHandler)
	ctr := containerConfig("check", ref, "sh", "-c",
		`cat /proc/self/uid_map /proc/self/gid_map; echo id=$(id -u):$(id -g); `+
			`echo rootfs=$(stat -c %u:%g / /bin/busybox /etc); echo vol=$(stat -c %u:%g /data); `+
			`echo made > /data/by-pod && echo wrote=$(stat -c %u:%g /data/by-pod); `+
			`echo made > /etc/by-pod && echo copied-up=$(stat -c %u:%g /etc/by-pod); `+
			`echo lo=$(cat /sys/class/net/lo/operstate) eth0=$(cat /sys/class/net/eth0/operstate); hostname`)
	ctr.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
		NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_CONTAINER, UsernsOptions: usernsOptions()},
	}}
	u := usernsOptions()
	ctr.Mounts = []*runtime.Mount{{ContainerPath: "/data", HostPath: vol, UidMappings: u.Uids, GidMappings: u.Gids}}
	st, out := d.runToExit(t, podID, cfg, ctr)
	t.Logf("container output:\n%s", out)
	if st.GetExitCode() != 0 {
		t.Fatalf("container exited %d: %s", st.GetExitCode(), out)
	}
	fields := strings.Fields(out)
	if len(fields) < 6 || strings.Join(fields[:6], " ") != "0 3145728 65536 0 3145728 65536" {
		t.Errorf("uid_map and gid_map = %q, want 0 3145728 65536 for both", fields)
	}
	for _, want := range []string{"id=0:0", "rootfs=0:0 0:0 0:0", "vol=0:0", "wrote=0:0", "copied-up=0:0", "lo=unknown eth0=up", "userns"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// On the host the file is the volume's own root's, not the pod's: an
	// idmapped mount maps both ways.
	var fi syscall.Stat_t
	if err := syscall.Stat(filepath.Join(vol, "by-pod"), &fi); err != nil {
		t.Fatalf("the file the pod wrote: %v", err)
	}
	if fi.Uid != 0 || fi.Gid != 0 {
		t.Errorf("the pod's file is owned by %d:%d on the host, want 0:0 (the volume's)", fi.Uid, fi.Gid)
	}
	// What it writes to its rootfs lands in the upper dir with the pod's
	// host IDs: the layers below are only idmapped, never written.
	upper := filepath.Join(d.Root, "image", "snapshots", st.GetId(), "upper", "etc", "by-pod")
	if err := syscall.Stat(upper, &fi); err != nil {
		t.Fatalf("the file the pod wrote to its rootfs: %v", err)
	}
	if fi.Uid != usernsHostID || fi.Gid != usernsHostID {
		t.Errorf("the pod's rootfs file is owned by %d:%d on the host, want %d:%d", fi.Uid, fi.Gid, usernsHostID, usernsHostID)
	}
}

// A pod in a user namespace survives a daemon SIGKILL: its pins, its
// idmapped rootfs and its container are found again, and removing it
// afterwards leaves nothing (the suite's leak check).
func TestUserNamespacePodSurvivesDaemonKill(t *testing.T) {
	d, ref := startUsernsDaemon(t)
	cfg := d.usernsPodConfig("userns-restart")
	podID := d.runPodOn(t, cfg, usernsHandler)
	ctr := containerConfig("sleeper", ref, "sleep", "3600")
	ctr.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
		NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_CONTAINER, UsernsOptions: usernsOptions()},
	}}
	id := d.startContainer(t, podID, cfg, ctr)

	d.kill9(t)
	d.Start()

	resp, err := d.Runtime.PodSandboxStatus(context.Background(), podID, false)
	if err != nil || resp.GetStatus().GetState() != runtime.PodSandboxState_SANDBOX_READY {
		t.Fatalf("pod after the restart: %v, %v; want ready", resp.GetStatus().GetState(), err)
	}
	if st := d.status(t, id); st.GetState() != runtime.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container after the restart: %v, want running", st.GetState())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stdout, stderr, err := d.Runtime.ExecSync(ctx, id, []string{"sh", "-c", "cat /proc/self/uid_map; stat -c %u /bin"}, 10*time.Second)
	if err != nil {
		t.Fatalf("ExecSync after the restart: %v (%s)", err, stderr)
	}
	if f := strings.Fields(string(stdout)); len(f) != 4 || f[1] != "3145728" || f[3] != "0" {
		t.Errorf("after the restart the container sees %q, want its mappings and its rootfs owned by 0", stdout)
	}
}

// A user namespace on a handler that cannot idmap mounts is refused, never
// run in the host's user namespace instead.
func TestUserNamespaceRefusedOnDebianRunc(t *testing.T) {
	d := StartDaemon(t)
	cfg := d.usernsPodConfig("userns-refused")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := d.Runtime.RunPodSandbox(ctx, cfg, "runc")
	if err == nil {
		t.Cleanup(func() { _ = d.Runtime.StopPodSandbox(ctx, id); _ = d.Runtime.RemovePodSandbox(ctx, id) })
	}
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"runc"`) || !strings.Contains(err.Error(), "userns_options") {
		t.Fatalf("RunPodSandbox with a user namespace on runc = %v, want InvalidArgument naming the handler and userns_options", err)
	}
}

// runPodOn is runPod on a named runtime handler.
func (d *Daemon) runPodOn(t *testing.T, cfg *runtime.PodSandboxConfig, handler string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := d.Runtime.RunPodSandbox(ctx, cfg, handler)
	if err != nil {
		t.Fatalf("RunPodSandbox %s on %s: %v", cfg.GetMetadata().GetName(), handler, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.Runtime.StopPodSandbox(ctx, id); err != nil {
			t.Errorf("cleanup: StopPodSandbox: %v", err)
		}
		if err := d.Runtime.RemovePodSandbox(ctx, id); err != nil {
			t.Errorf("cleanup: RemovePodSandbox: %v", err)
		}
	})
	return id
}

// searchable lets a pod's root, a user with no rights over the host's
// files, reach the rootfs under the test's dir, which MkdirTemp made 0700:
// as /var/lib/minicri (0711) is on a node.
func searchable(t *testing.T, dir string) {
	t.Helper()
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
}

// A pod in a user namespace that fails after its namespaces are made (here:
// no CNI network) leaves no pin, no infra process and no pod dir behind.
func TestUserNamespacePodFailureLeavesNothing(t *testing.T) {
	requireCurrentRunc(t)
	d := StartDaemon(t) // no CNI configuration: the network set-up fails
	cfg := d.usernsPodConfig("userns-fails")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := d.Runtime.RunPodSandbox(ctx, cfg, usernsHandler)
	if err == nil {
		t.Cleanup(func() { _ = d.Runtime.StopPodSandbox(ctx, id); _ = d.Runtime.RemovePodSandbox(ctx, id) })
		t.Fatal("RunPodSandbox without a CNI network succeeded")
	}
	pods := filepath.Join(d.RunDir, "pods")
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mountinfo), pods+"/") {
		t.Errorf("mounts left under %s after the failed RunPodSandbox", pods)
	}
	if entries, _ := os.ReadDir(pods); len(entries) > 0 {
		t.Errorf("pod dirs left: %v", entries)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), pods) {
			t.Errorf("a process of the failed pod is left: %s %q", p, b)
		}
	}
}

// A daemon killed in the middle of making a pod in a user namespace (its
// infra process started but not recorded, its namespaces pinned, its
// network up) rolls the pod back at start: nothing is left.
func TestCrashDuringUserNamespacePodRollsBack(t *testing.T) {
	requireCurrentRunc(t)
	for _, point := range []string{"sandbox-userns-unrecorded", "sandbox-userns-pinned", "sandbox-after-pin", "sandbox-after-network"} {
		t.Run(point, func(t *testing.T) {
			d := startDaemonCrashingAt(t, point)
			d.bridgeNetwork(t)
			cfg := d.usernsPodConfig("userns-crash")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := d.Runtime.RunPodSandbox(ctx, cfg, usernsHandler); err == nil {
				t.Fatal("RunPodSandbox succeeded through its crash point")
			}
			d.waitCrashed(t, point)
			lc := leakCheck{}
			lc.pids = append(lc.pids, d.infraProcesses(t)...)
			// Before the pod's PID namespace is known to be unshared, the
			// infra process that made its namespaces is still there.
			if strings.HasPrefix(point, "sandbox-userns-") && len(lc.pids) == 0 {
				t.Fatalf("no infra process found after the crash at %s", point)
			}
			d.Start()
			pods, err := d.Runtime.ListPodSandbox(ctx, nil)
			if err != nil || len(pods) != 0 {
				t.Fatalf("after the repair: %d sandboxes listed (%v), want the half-made one rolled back", len(pods), err)
			}
			d.assertNoLeaks(t, lc)
			d.runPodOn(t, cfg, usernsHandler)
		})
	}
}

// A pod with hostUsers: false and no RuntimeClass runs, as on containerd 2.x
// and cri-o: the default handler is the current runc, which idmaps the
// rootfs and the pod's files; the pod reports the handler it got.
func TestUserNamespacePodWithoutRuntimeClass(t *testing.T) {
	d, ref := startUsernsDaemon(t)
	cfg := d.usernsPodConfig("userns-default")
	podID := d.runPodOn(t, cfg, "")
	ctr := containerConfig("check", ref, "sh", "-c", "cat /proc/self/uid_map; echo rootfs=$(stat -c %u:%g / /etc/hostname); id -u")
	ctr.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
		NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_CONTAINER, UsernsOptions: usernsOptions()},
	}}
	st, out := d.runToExit(t, podID, cfg, ctr)
	if st.GetExitCode() != 0 {
		t.Fatalf("container exited %d: %s", st.GetExitCode(), out)
	}
	if f := strings.Fields(out); len(f) < 3 || strings.Join(f[:3], " ") != "0 3145728 65536" {
		t.Errorf("uid_map in the pod: %q, want 0 3145728 65536", out)
	}
	if !strings.Contains(out, "rootfs=0:0 0:0") || !strings.HasSuffix(strings.TrimSpace(out), "\n0") {
		t.Errorf("the pod sees %q, want its rootfs and files owned by its root, and to be root", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pod, err := d.Runtime.PodSandboxStatus(ctx, podID, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := pod.GetStatus().GetRuntimeHandler(); got != usernsHandler {
		t.Errorf("PodSandboxStatus runtime_handler = %q, want %q (the default, chosen at start)", got, usernsHandler)
	}
}

// A pod in a user namespace that shares one PID namespace among its
// containers: its infra process (PID 1 there) made the user namespace too.
func TestUserNamespacePodSharesItsPIDNamespace(t *testing.T) {
	d, ref := startUsernsDaemon(t)
	cfg := d.usernsPodConfig("userns-pidns")
	cfg.Linux.SecurityContext.NamespaceOptions.Pid = runtime.NamespaceMode_POD
	podID := d.runPodOn(t, cfg, usernsHandler)
	ctr := containerConfig("ps", ref, "sh", "-c", "cat /proc/1/cmdline | tr '\\0' ' '; echo; cat /proc/self/uid_map")
	ctr.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
		NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_POD, UsernsOptions: usernsOptions()},
	}}
	st, out := d.runToExit(t, podID, cfg, ctr)
	if st.GetExitCode() != 0 || !strings.Contains(out, "minicri-pause pause") || !strings.Contains(out, "3145728") {
		t.Fatalf("exit %d, output %q: want PID 1 the pod's infra process, and the pod's mappings", st.GetExitCode(), out)
	}
}

// A handler whose runtime is not installed (runc-current before make deps)
// spoils nothing: the daemon starts, Status is ready and reports no feature
// of it, and a pod on it is refused at once, naming the key to fix.
func TestMissingHandlerBinaryFailsOnlyItsPods(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-runc")
	d := StartDaemon(t, WithConfig("[runtime.handlers.runc]\npath = \"runc\"\n[runtime.handlers.gone]\npath = \""+missing+"\"\n"))
	resp, err := d.Runtime.Status(context.Background(), true)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	for _, c := range resp.GetStatus().GetConditions() {
		if c.GetType() == runtime.RuntimeReady && !c.GetStatus() {
			t.Errorf("RuntimeReady false (%s) because of a handler that is not the default", c.GetMessage())
		}
	}
	for _, h := range resp.GetRuntimeHandlers() {
		if h.GetName() == "gone" && (h.GetFeatures().GetUserNamespaces() || h.GetFeatures().GetRecursiveReadOnlyMounts()) {
			t.Errorf("handler gone reports features %v", h.GetFeatures())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := d.Runtime.RunPodSandbox(ctx, d.podConfig("on-gone"), "gone")
	if err == nil {
		t.Cleanup(func() { _ = d.Runtime.StopPodSandbox(ctx, id); _ = d.Runtime.RemovePodSandbox(ctx, id) })
	}
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "runtime.handlers.gone.path") {
		t.Fatalf("RunPodSandbox on a handler without its binary = %v, want FailedPrecondition naming runtime.handlers.gone.path", err)
	}
}

// startUsernsDaemon starts a daemon whose dirs the pods' mapped root can
// search, on a bridge network of its own, with busybox pulled.
func startUsernsDaemon(t *testing.T) (d *Daemon, busybox string) {
	t.Helper()
	requireCurrentRunc(t)
	d = StartDaemon(t)
	searchable(t, d.Dir)
	d.bridgeNetwork(t)
	busybox = busyboxRef(t)
	d.pull(t, busybox)
	return d, busybox
}
