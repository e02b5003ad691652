//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// An in-place resize of a pod, asked of the API as kubectl does (the pod's
// resize subresource), reaches an NRI plugin through the real kubelet: the
// kubelet calls UpdatePodSandboxResources before it changes the pod's
// cgroup, then UpdateContainerResources, and the plugin sees the pod's new
// memory limit and the container's update; the container's cgroup has the
// new limit, and the pod's status says the resize is done.
func TestKubeletResizeReachesNRIPlugin(t *testing.T) {
	n, cp := newAPINode(t)
	d, k, ref := n.d, n.k, n.ref
	// No pod yet: the kubelet has made none.
	plugin := startNRIPlugin(t, buildNRIPlugin(t), d, "-adjust=false")
	plugin.waitEvent(t, "Synchronize pods=0 containers=0")

	const before, after = 128 << 20, 192 << 20
	limits := func(memory int64) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: *resource.NewQuantity(memory, resource.BinarySI)}
	}
	grace := int64(2)
	cp.createPod(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "resized", Namespace: "e2e"},
		Spec: corev1.PodSpec{
			NodeName:                      k.NodeName, // no scheduler runs
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "c", Image: ref, ImagePullPolicy: corev1.PullIfNotPresent,
				Command:   []string{"sh", "-c", sleepForever},
				Resources: corev1.ResourceRequirements{Requests: limits(before), Limits: limits(before)},
				ResizePolicy: []corev1.ContainerResizePolicy{
					{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.NotRequired},
					{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
				},
			}},
		},
	})
	cp.waitPod(t, "e2e", "resized", "running", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	ctrs, err := d.Runtime.ListContainers(context.Background(), &runtime.ContainerFilter{
		State:         &runtime.ContainerStateValue{State: runtime.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"io.kubernetes.pod.name": "resized", "io.kubernetes.container.name": "c"},
	})
	if err != nil || len(ctrs) != 1 {
		t.Fatalf("the running container of pod resized: %v %v", ctrs, err)
	}
	id := ctrs[0].GetId()
	if got := strings.TrimSpace(n.execSync(t, id, "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes")); got != fmt.Sprint(before) {
		t.Fatalf("memory limit before the resize %s, want %d", got, before)
	}

	patch := map[string]any{"spec": map[string]any{"containers": []map[string]any{{
		"name": "c", "resources": map[string]any{"requests": limits(after), "limits": limits(after)},
	}}}}
	cp.mustCall(t, http.MethodPatch, "/api/v1/namespaces/e2e/pods/resized/resize", patch)

	// The pod's name in NRI is the kubelet's sandbox name, the pod's.
	waitPluginLine(t, plugin, fmt.Sprintf("UpdatePodSandbox resized memory=%d ", after))
	waitPluginLine(t, plugin, fmt.Sprintf("UpdateContainer c memory=%d", after))
	waitPluginLine(t, plugin, "PostUpdateContainer c")
	waitFor(t, "the container's new memory limit", time.Minute, func() bool {
		return strings.TrimSpace(n.execSync(t, id, "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes")) == fmt.Sprint(after)
	})
	cp.waitPod(t, "e2e", "resized", "the resize reported done", time.Minute, func(p *corev1.Pod) bool {
		cs := containerStatus(p, "c")
		return cs != nil && cs.Resources != nil && cs.Resources.Limits.Memory().Value() == after
	})
}

// waitPluginLine waits until the plugin logged an event line starting with
// prefix.
func waitPluginLine(t *testing.T, p *nriPlugin, prefix string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("an NRI event %q", prefix), time.Minute, func() bool {
		for _, l := range p.lines() {
			if strings.HasPrefix(l, prefix) {
				return true
			}
		}
		return false
	})
}
