//go:build e2e

package e2e

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/testimage"
)

// Static pods and their mirror pods under a kubelet with a real API server,
// as the node conformance suite's MirrorPod specs drive them: the mirror pod
// runs, follows an update of the static pod's image, comes back after a
// graceful and a forced delete, and goes with the manifest. Each step has
// the suite's two minutes; how long each took is logged (docs/kubelet.md
// says where the time goes). The kubelet runs with its default PLEG, which
// relists every second: it must never see a sandbox or container die
// before it has seen it start, which it did while minicri listed a sandbox
// that RunPodSandbox was still making.
func TestKubeletMirrorPods(t *testing.T) {
	n, cp := newAPINode(t, "--feature-gates=EventedPLEG=false")
	k := n.k
	first := n.ref
	second := strings.SplitN(first, "/", 2)[0] + "/e2e/busybox:two" // the same registry
	testimage.Push(t, testimage.Busybox(t, testimage.WithLabels(map[string]string{"v": "2"})), second)

	mirror := k.podName("static")
	waitMirror := func(what string, cond func(*corev1.Pod) bool) *corev1.Pod {
		t.Helper()
		start := time.Now()
		deadline := start.Add(2 * time.Minute)
		for {
			p := cp.pod(t, "e2e", mirror)
			if cond(p) {
				t.Logf("%s: %s", what, time.Since(start).Round(100*time.Millisecond))
				return p
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 2 minutes; mirror pod: %+v\n%s", what, p, k.logTail())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// A new mirror pod (another UID), running, of the static pod's config.
	recreated := func(old types.UID, image string) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool {
			return p != nil && p.UID != old && p.Status.Phase == corev1.PodRunning &&
				p.Annotations["kubernetes.io/config.mirror"] != "" &&
				p.Annotations["kubernetes.io/config.mirror"] == p.Annotations["kubernetes.io/config.hash"] &&
				len(p.Spec.Containers) == 1 && p.Spec.Containers[0].Image == image
		}
	}

	pod := staticPod("static", n.container("test", sleepForever))
	pod.Spec.TerminationGracePeriodSeconds = nil // the suite's pods keep the default 30 s
	k.writeManifest(t, pod)
	uid := waitMirror("mirror pod running", recreated("", first)).UID

	pod.Spec.Containers[0].Image = second
	k.writeManifest(t, pod)
	uid = waitMirror("mirror pod of the updated static pod running", recreated(uid, second)).UID
	if id := k.runningContainer(t, "static", "test"); k.d.status(t, id).GetImage().GetImage() != second {
		t.Errorf("the running container is not of the updated image %s", second)
	}

	cp.deletePod(t, "e2e", mirror, 30)
	uid = waitMirror("gracefully deleted mirror pod back", recreated(uid, second)).UID

	cp.deletePod(t, "e2e", mirror, 0)
	waitMirror("forcibly deleted mirror pod back", recreated(uid, second))

	k.removeManifest(t, "static")
	waitMirror("mirror pod gone with the manifest", func(p *corev1.Pod) bool { return p == nil })
	for _, c := range k.criContainers(t, "static") {
		if c.GetState() == runtime.ContainerState_CONTAINER_RUNNING {
			t.Errorf("container %s of the removed static pod still runs", c.GetId())
		}
	}

	if died := diedBeforeStarted(k.log); len(died) > 0 {
		t.Errorf("the kubelet's relist saw these die before it saw them start (listed while being made?): %v", died)
	}
}

// plegEvent matches a kubelet log line of a PLEG event for one of its pods.
var plegEvent = regexp.MustCompile(`"SyncLoop \(PLEG\): event for pod".*"Type":"(Container[A-Za-z]+)","Data":"([0-9a-f]{64})"`)

// diedBeforeStarted reads a kubelet log and returns the IDs whose first PLEG
// event was ContainerDied.
func diedBeforeStarted(log string) []string {
	data, _ := os.ReadFile(log)
	seen := map[string]bool{}
	var died []string
	for _, line := range strings.Split(string(data), "\n") {
		m := plegEvent.FindStringSubmatch(line)
		if m == nil || seen[m[2]] {
			continue
		}
		seen[m[2]] = true
		if m[1] == "ContainerDied" {
			died = append(died, m[2])
		}
	}
	return died
}
