//go:build e2e && guest

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// guestTest is how a guest test starts: the guest (booted at the first
// call), minicri's journal shown if the test fails, and a CRI client
// connected to the guest's minicri.
func guestTest(t *testing.T) (*Guest, *Daemon) {
	t.Helper()
	g := bootedGuest(t)
	g.LogJournalOnFailure(t)
	return g, g.CRI(t)
}

// sleeper runs a pod named name (runPod) with one container "c" that
// sleeps for an hour, and returns the pod and the container's ID.
func (g *Guest) sleeper(t *testing.T, d *Daemon, name string) (*guestPod, string) {
	t.Helper()
	p := g.runPod(t, d, guestPodConfig(name))
	return p, g.startIn(t, d, p, guestContainer("c", "sleep", "3600"))
}

// guestPod is a pod in the guest's minicri, made as the kubelet makes a
// BestEffort pod with the systemd cgroup driver.
type guestPod struct {
	ID    string
	UID   string
	Cfg   *runtime.PodSandboxConfig
	Slice string // the pod's slice unit: kubepods-besteffort-pod<uid>.slice
}

// guestPodConfig is a pod config as kubelet v1.37 sends it with the systemd
// driver: the whole path of the pod's slice as its cgroup parent, the logs
// under /var/log/pods.
func guestPodConfig(name string) *runtime.PodSandboxConfig {
	uid := randomHex(8)
	return &runtime.PodSandboxConfig{
		Metadata:     &runtime.PodSandboxMetadata{Name: name, Namespace: "e2e", Uid: uid},
		Hostname:     name,
		LogDirectory: fmt.Sprintf("/var/log/pods/e2e_%s_%s", name, uid),
		Linux: &runtime.LinuxPodSandboxConfig{
			CgroupParent: fmt.Sprintf("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice", uid),
		},
	}
}

// runPod runs a sandbox in the guest. When the test ends it stops and
// removes it and fails the test if anything of the pod or its containers
// stayed behind in the guest (guestLeftovers); then it stops the pod's
// slice, as the kubelet does once a pod is gone.
func (g *Guest) runPod(t *testing.T, d *Daemon, cfg *runtime.PodSandboxConfig) *guestPod {
	t.Helper()
	p := &guestPod{UID: cfg.GetMetadata().GetUid(), Cfg: cfg}
	p.Slice = cfg.GetLinux().GetCgroupParent()[strings.LastIndex(cfg.GetLinux().GetCgroupParent(), "/")+1:]
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(time.Minute))
	defer cancel()
	id, err := d.Runtime.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		t.Fatalf("RunPodSandbox %s: %v", cfg.GetMetadata().GetName(), err)
	}
	p.ID = id
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(time.Minute))
		defer cancel()
		keys := []string{p.ID}
		if cs, err := d.Runtime.ListContainers(ctx, &runtime.ContainerFilter{PodSandboxId: p.ID}); err == nil {
			for _, c := range cs {
				keys = append(keys, c.GetId())
			}
		}
		if err := d.Runtime.StopPodSandbox(ctx, p.ID); err != nil {
			t.Errorf("cleanup: StopPodSandbox: %v", err)
		}
		if err := d.Runtime.RemovePodSandbox(ctx, p.ID); err != nil {
			t.Errorf("cleanup: RemovePodSandbox: %v", err)
		}
		if left := g.settledLeftovers(t, keys...); left != "" {
			t.Errorf("left behind in the guest after the pod was removed:\n%s", left)
		}
		g.Run(t, "systemctl stop "+p.Slice+" 2>/dev/null || true")
	})
	return p
}

// guestPoll is the pause between two looks at the guest while a test
// waits on it: each look is an ssh command or a CRI call that forks in the
// guest, and under TCG the work waited for (other tests' too: they run
// side by side) needs that CPU.
const guestPoll = time.Second

// waitFor is the suite's waitFor for a condition looked at in the guest.
func (g *Guest) waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	waitEvery(t, what, timeout, guestPoll, cond)
}

// settledLeftovers is leftovers once systemd has caught up: it notices an
// emptied scope (a monitor that exited with the pod's last container)
// asynchronously, and a guest whose systemd answers 30 s late (seen under
// TCG with the stage's eight tests at once) still lists the scope as
// running for a while. What is still there after 30 s (guest-scaled) is
// left behind.
func (g *Guest) settledLeftovers(t testing.TB, keys ...string) string {
	t.Helper()
	deadline := time.Now().Add(g.Timeout(30 * time.Second))
	for {
		left := g.leftovers(t, keys...)
		if left == "" || time.Now().After(deadline) {
			return left
		}
		time.Sleep(guestPoll)
	}
}

// leftovers lists the systemd units, cgroups, mounts and processes in the
// guest whose names hold one of keys (pod and container IDs); "" when none.
func (g *Guest) leftovers(t testing.TB, keys ...string) string {
	t.Helper()
	var script strings.Builder
	for _, k := range keys {
		// find's complaints about cgroups other tests remove meanwhile are
		// no leftovers: only the listed names count.
		// A monitor is named after its first container but may serve
		// others (runtime.monitor_share), other tests' pods included: while
		// it has children it is theirs, not a leftover of k.
		fmt.Fprintf(&script, `k=%s
keep='^$'
for p in $(ps -eo pid,args | grep -F -- "$k" | grep -F minicri-conmon | grep -v grep | awk '{print $1}'); do
	[ -n "$(cat /proc/$p/task/*/children 2>/dev/null | tr -d ' \n')" ] && keep=minicri-conmon
done
{
systemctl list-units --all --no-legend --plain | grep -F -- "$k" | sed 's/^/unit: /'
find /sys/fs/cgroup -type d -name "*$k*" 2>/dev/null | sed 's/^/cgroup: /'
grep -F -- "$k" /proc/self/mountinfo | sed 's/^/mount: /'
ps -eo pid,args | grep -F -- "$k" | grep -v grep | sed 's/^/process: /'
} | grep -v -- "$keep" || true
`, shellQuote(k))
	}
	script.WriteString("true\n")
	return strings.TrimSpace(g.Run(t, script.String()))
}

// guestContainer is a container config of the guest's busybox image.
func guestContainer(name string, cmd ...string) *runtime.ContainerConfig {
	return containerConfig(name, guestBusyboxRef, cmd...)
}

// startIn creates and starts a container in the pod, within the guest's waits.
func (g *Guest) startIn(t *testing.T, d *Daemon, p *guestPod, cfg *runtime.ContainerConfig) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(30*time.Second))
	defer cancel()
	id, err := d.Runtime.CreateContainer(ctx, p.ID, cfg, p.Cfg)
	if err != nil {
		t.Fatalf("CreateContainer %s: %v", cfg.GetMetadata().GetName(), err)
	}
	if err := d.Runtime.StartContainer(ctx, id); err != nil {
		t.Fatalf("StartContainer %s: %v", cfg.GetMetadata().GetName(), err)
	}
	return id
}

// execSync runs cmd in a container and returns stdout, stderr and the exit
// code (the CRI's ExecSync; a non-zero exit is not an error here).
func (g *Guest) execSync(t *testing.T, d *Daemon, id string, cmd ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(30*time.Second))
	defer cancel()
	stdout, stderr, err := d.Runtime.ExecSync(ctx, id, cmd, g.Timeout(20*time.Second))
	if err == nil {
		return string(stdout), string(stderr), 0
	}
	if ce, ok := err.(interface{ ExitStatus() int }); ok {
		return string(stdout), string(stderr), ce.ExitStatus()
	}
	t.Fatalf("ExecSync %v in %s: %v", cmd, id, err)
	return "", "", -1
}

// containerPID is the host (guest) pid of a running container's process,
// from the scope's cgroup.procs.
func (g *Guest) containerPID(t *testing.T, p *guestPod, id string) int {
	t.Helper()
	out := g.Run(t, "head -1 "+shellQuote(g.scopeDir(p, id)+"/cgroup.procs"))
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("pid of %s: %q", id, out)
	}
	return pid
}

// scopeDir is a container's cgroup in the guest: the scope runc made
// through systemd in the pod's slice.
func (g *Guest) scopeDir(p *guestPod, id string) string {
	return "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/" + p.Slice + "/minicri-" + id + ".scope"
}

// ForwardTCP makes 127.0.0.1:port in the guest reachable at a port on the
// host's loopback until the test ends, and returns the host port.
func (g *Guest) ForwardTCP(t testing.TB, port int) int {
	t.Helper()
	local := freePort()
	spec := fmt.Sprintf("127.0.0.1:%d:127.0.0.1:%d", local, port)
	if out, err := exec.Command("ssh", append(g.sshOptions(), "-O", "forward", "-L", spec, "root@127.0.0.1")...).CombinedOutput(); err != nil {
		t.Fatalf("ssh forward %s: %v: %s", spec, err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command("ssh", append(g.sshOptions(), "-O", "cancel", "-L", spec, "root@127.0.0.1")...).Run()
	})
	return local
}

// hostURL rewrites a streaming URL of the guest's minicri (on the guest's
// loopback) to one the host reaches through ssh.
func (g *Guest) hostURL(t *testing.T, u string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatalf("streaming URL %q: %v", u, err)
	}
	port, err := strconv.Atoi(parsed.Port())
	if err != nil {
		t.Fatalf("streaming URL %q has no port", u)
	}
	parsed.Host = fmt.Sprintf("127.0.0.1:%d", g.ForwardTCP(t, port))
	return parsed.String()
}

// systemdProperty is a unit's property in the guest (systemctl show).
func (g *Guest) systemdProperty(t *testing.T, unit, prop string) string {
	t.Helper()
	return strings.TrimSpace(g.Run(t, fmt.Sprintf("systemctl show -p %s --value %s", prop, shellQuote(unit))))
}

// kernelFeatures is what the guest's minicri found its kernel can do, as
// its verbose Status reports it (internal/kernelfeat): each feature's name
// and "yes", or "no: why".
func (g *Guest) kernelFeatures(t *testing.T, d *Daemon) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(30*time.Second))
	defer cancel()
	st, err := d.Runtime.Status(ctx, true)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	feats := map[string]string{}
	if err := json.Unmarshal([]byte(st.GetInfo()["kernelFeatures"]), &feats); err != nil || len(feats) == 0 {
		t.Fatalf("Status info kernelFeatures %q: %v", st.GetInfo()["kernelFeatures"], err)
	}
	return feats
}

// missingKernelFeatures names those of features the guest's kernel lacks,
// each with kernelfeat's reason, or "" when it has them all.
func (g *Guest) missingKernelFeatures(t *testing.T, d *Daemon, features ...string) string {
	t.Helper()
	have := g.kernelFeatures(t, d)
	var missing []string
	for _, f := range features {
		a, ok := have[f]
		if !ok {
			t.Fatalf("Status reports no kernel feature %q (it has %v)", f, have)
		}
		if a != "yes" {
			missing = append(missing, f+" ("+a+")")
		}
	}
	return strings.Join(missing, ", ")
}

// needsKernel skips the test when the guest's kernel lacks one of
// features, naming each and why, as minicri's probe found it: what a test
// needs of the kernel is a feature, never a release.
func (g *Guest) needsKernel(t *testing.T, d *Daemon, features ...string) {
	t.Helper()
	if missing := g.missingKernelFeatures(t, d, features...); missing != "" {
		t.Skipf("kernel %s lacks %s", g.KernelRelease, missing)
	}
}

// needsCRIU skips the test when the guest's minicri finds no working CRIU
// (Status's checkpoint, as `crictl info` shows it: some releases package
// none), after checking that a checkpoint is then refused with the reason
// Status gives: FailedPrecondition, nothing half made.
func (g *Guest) needsCRIU(t *testing.T, d *Daemon) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(time.Minute))
	defer cancel()
	st, err := d.Runtime.Status(ctx, true)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	var ckpt struct {
		Available bool
		Reason    string
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["checkpoint"]), &ckpt); err != nil {
		t.Fatalf("Status info checkpoint %q: %v", st.GetInfo()["checkpoint"], err)
	}
	if ckpt.Available {
		return
	}
	if ckpt.Reason == "" {
		t.Fatalf("Status: checkpoint unavailable without a reason")
	}
	_, id := g.sleeper(t, d, "nocriu")
	err = d.Runtime.CheckpointContainer(ctx, &runtime.CheckpointContainerRequest{ContainerId: id, Location: "/tmp/nocriu-" + randomHex(4) + ".tar"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), ckpt.Reason) {
		t.Errorf("CheckpointContainer without CRIU: %v, want FailedPrecondition saying %q", err, ckpt.Reason)
	}
	if out := strings.TrimSpace(g.Run(t, "ls /tmp/nocriu-* 2>/dev/null; true")); out != "" {
		t.Errorf("a refused checkpoint left %s", out)
	}
	t.Skipf("the node has no working CRIU: %s", ckpt.Reason)
}
