//go:build e2e && guest

package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// failedPodID takes the sandbox's ID out of a failed RunPodSandbox's error.
var failedPodID = regexp.MustCompile(`cni add of pod ([0-9a-f]{64})`)

// A RunPodSandbox whose CNI ADD fails, and whose DEL fails too, leaves
// nothing in the guest under the systemd driver: no minicri-pause scope,
// cgroup, mount, process or pod dir, at any of the kubelet's retries. On
// Debian 11 each such failure left five. Not parallel: for its duration
// the guest's first network config is one whose plugin refuses every pod.
func TestGuestFailedPodLeavesNothing(t *testing.T) {
	g, d := guestTest(t)
	g.WriteFile(t, "/opt/cni/bin/minicri-e2e-failall", []byte(failingPluginScript), 0o755)
	g.WriteFile(t, "/etc/cni/net.d/00-minicri-e2e-fail.conflist",
		[]byte(`{"cniVersion":"1.0.0","name":"e2e-fail","plugins":[{"type":"minicri-e2e-failall"}]}`), 0o644)
	t.Cleanup(func() {
		g.Run(t, "rm -f /etc/cni/net.d/00-minicri-e2e-fail.conflist /opt/cni/bin/minicri-e2e-failall")
	})
	cfg := guestPodConfig("failnet")
	cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_POD}}
	slice := cfg.GetLinux().GetCgroupParent()[strings.LastIndex(cfg.GetLinux().GetCgroupParent(), "/")+1:]
	t.Cleanup(func() { g.Run(t, "systemctl stop "+slice+" 2>/dev/null || true") })
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(2*time.Minute))
	defer cancel()
	var ids []string
	for attempt := range 3 { // as the kubelet retries
		id, err := d.Runtime.RunPodSandbox(ctx, cfg, "")
		if err == nil {
			_ = d.Runtime.StopPodSandbox(ctx, id)
			_ = d.Runtime.RemovePodSandbox(ctx, id)
			t.Fatalf("attempt %d: RunPodSandbox succeeded on a plugin that refuses every pod", attempt)
		}
		m := failedPodID.FindStringSubmatch(err.Error())
		if m == nil {
			t.Fatalf("attempt %d: RunPodSandbox failed with %v, want a failed CNI ADD naming the pod", attempt, err)
		}
		ids = append(ids, m[1])
	}
	if left := g.settledLeftovers(t, ids...); left != "" {
		t.Errorf("left behind in the guest by the failed RunPodSandbox calls:\n%s", left)
	}
	for _, id := range ids {
		if out, code := g.RunErr(t, "ls -d /run/minicri/pods/"+id+" /var/lib/minicri/sandboxes/"+id+"* 2>/dev/null"); code == 0 && strings.TrimSpace(out) != "" {
			t.Errorf("pod files left: %s", out)
		}
	}
}
