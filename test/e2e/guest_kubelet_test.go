//go:build e2e && guest

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// guestKubeletConfig is the kubelet's configuration in the guest: only
// what a standalone kubelet (static pods, no API server) needs to run and
// to be asked about its pods. Nothing about cgroups: the kubelet's defaults
// (cgroupsPerQOS, the cgroup root /, failCgroupV1: true, node allocatable
// enforced on pods) and the cgroup driver minicri reports in RuntimeConfig.
const guestKubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix:///run/minicri/minicri.sock
staticPodPath: /etc/kubernetes/manifests
fileCheckFrequency: 2s
address: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
registerNode: false
`

const guestKubeletUnit = `[Unit]
Description=kubelet (minicri guest test)
After=minicri.service
Wants=minicri.service

[Service]
ExecStart=/usr/local/bin/kubelet --config /etc/kubernetes/kubelet.yaml --v=2
Restart=no
`

// TestGuestKubelet runs the real kubelet v1.37.2 in the guest as a systemd
// service with its default cgroup settings, against minicri with the
// systemd driver, and a static pod with an exec readiness probe to Ready:
// its container runs in a scope of the pod's slice the kubelet made.
func TestGuestKubelet(t *testing.T) {
	g, d := guestTest(t)
	g.startKubelet(t, d)

	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
spec:
  containers:
  - name: c
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", "echo ok >/tmp/ready; exec sleep 3600"]
    readinessProbe:
      exec:
        command: ["cat", "/tmp/ready"]
      periodSeconds: 2
`, guestBusyboxRef)
	start := time.Now()
	g.WriteFile(t, "/etc/kubernetes/manifests/web.yaml", []byte(manifest), 0o644)

	pod := g.waitKubeletPod(t, "web", "Ready", g.Timeout(90*time.Second), podReady)
	t.Logf("the static pod was Ready %.1f s after its manifest was written", time.Since(start).Seconds())
	journal := g.Journal("kubelet.service", 2000)
	if !regexp.MustCompile(`cgroupDriver="?systemd`).MatchString(journal) {
		t.Errorf("the kubelet's journal does not say it uses the systemd cgroup driver")
	}
	slice := "kubepods-besteffort-pod" + strings.ReplaceAll(string(pod.UID), "-", "_") + ".slice"
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(30*time.Second))
	defer cancel()
	cs, err := d.Runtime.ListContainers(ctx, &runtime.ContainerFilter{
		State:         &runtime.ContainerStateValue{State: runtime.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(pod.UID)}})
	if err != nil || len(cs) != 1 {
		t.Fatalf("the static pod's running containers in minicri: %v %v", cs, err)
	}
	if got := g.systemdProperty(t, "minicri-"+cs[0].GetId()+".scope", "Slice"); got != slice {
		t.Errorf("the container's scope is in %q, want the kubelet's pod slice %s", got, slice)
	}
}

// startKubelet runs the kubelet in the guest as kubelet.service with
// guestKubeletConfig (static pods from /etc/kubernetes/manifests, its API
// on 127.0.0.1:10250 open to anonymous callers). When the test ends it
// removes the static pods, stops the kubelet, removes the pods it left in
// minicri and fails the test if anything of them stayed in the guest.
// extra is added to the configuration (top-level YAML keys).
func (g *Guest) startKubelet(t *testing.T, d *Daemon, extra ...string) {
	t.Helper()
	if os.Getenv(kubeletEnv) == "" {
		t.Fatalf("%s is not set: the guest stage runs the real kubelet (make guest-test sets it)", kubeletEnv)
	}
	g.WriteFile(t, "/etc/kubernetes/kubelet.yaml", []byte(guestKubeletConfig+strings.Join(extra, "")), 0o644)
	g.WriteFile(t, "/etc/systemd/system/kubelet.service", []byte(guestKubeletUnit), 0o644)
	g.Run(t, "mkdir -p /etc/kubernetes/manifests && systemctl daemon-reload && systemctl start kubelet.service")
	t.Cleanup(func() {
		defer func(start time.Time) { t.Logf("cleanup took %.1f s", time.Since(start).Seconds()) }(time.Now())
		if t.Failed() {
			t.Logf("--- kubelet.service journal (tail) ---\n%s", g.Journal("kubelet.service", 120))
		}
		// The kubelet leaves its pods when it stops, as on a node: remove
		// them, then check nothing of them stayed.
		g.Run(t, "rm -f /etc/kubernetes/manifests/*; systemctl stop kubelet.service; systemctl reset-failed kubelet.service 2>/dev/null || true")
		ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(time.Minute))
		defer cancel()
		pods, err := d.Runtime.ListPodSandbox(ctx, nil)
		if err != nil {
			t.Errorf("cleanup: ListPodSandbox: %v", err)
			return
		}
		var keys []string
		for _, p := range pods {
			keys = append(keys, p.GetId())
			if cs, err := d.Runtime.ListContainers(ctx, &runtime.ContainerFilter{PodSandboxId: p.GetId()}); err == nil {
				for _, c := range cs {
					keys = append(keys, c.GetId())
				}
			}
			if err := d.Runtime.StopPodSandbox(ctx, p.GetId()); err != nil {
				t.Errorf("cleanup: StopPodSandbox: %v", err)
			}
			if err := d.Runtime.RemovePodSandbox(ctx, p.GetId()); err != nil {
				t.Errorf("cleanup: RemovePodSandbox: %v", err)
			}
		}
		if left := g.leftovers(t, keys...); left != "" {
			t.Errorf("left behind after the kubelet's pods were removed:\n%s", left)
		}
	})

}

// waitKubeletPod waits until the guest kubelet's static pod name (its
// name without the node's suffix) meets cond, as its /pods API shows it.
func (g *Guest) waitKubeletPod(t *testing.T, name, what string, timeout time.Duration, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	g.waitFor(t, "the static pod "+name+" to be "+what, timeout, func() bool {
		out, err := g.run("curl -sk --max-time 10 https://127.0.0.1:10250/pods")
		if err != nil {
			return false
		}
		var list corev1.PodList
		if json.Unmarshal([]byte(out), &list) != nil {
			return false
		}
		for i := range list.Items {
			if strings.HasPrefix(list.Items[i].Name, name+"-") && cond(&list.Items[i]) {
				pod = &list.Items[i]
				return true
			}
		}
		return false
	})
	return pod
}
