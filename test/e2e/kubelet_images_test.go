//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// The kubelet's image garbage collection removes every unused image it may
// but a pinned one (image.pinned_images) and one a running container uses:
// the kubelet reads pinned: true from ListImages, and matches the image IDs
// of ListContainers (ImageId) against ListImages' to find those in use. It
// is told to remove every unused image (imageGCFlags); the unpinned unused
// image going is the proof that it ran.
func TestKubeletImageGCKeepsPinnedImages(t *testing.T) {
	kubeletBinary(t)
	reg := registry.Start(t, registry.Options{})
	pinnedRef, otherRef, usedRef := reg.Host()+"/e2e/pinned:1", reg.Host()+"/e2e/other:1", reg.Host()+"/e2e/used:1"
	for ref, which := range map[string]string{pinnedRef: "pinned", otherRef: "other", usedRef: "used"} {
		testimage.Push(t, testimage.Busybox(t, testimage.WithLabels(map[string]string{"which": which})), ref)
	}
	d := StartDaemon(t, WithConfig(fmt.Sprintf("[image.pinned_images]\nkeep = %q\n", pinnedRef)))
	pinnedID, otherID, usedID := d.pull(t, pinnedRef), d.pull(t, otherRef), d.pull(t, usedRef)
	if pinnedID == otherID || usedID == otherID || usedID == pinnedID {
		t.Fatal("the three test images are not three")
	}
	if !imagePinned(t, d, pinnedRef) || imagePinned(t, d, otherRef) || imagePinned(t, d, usedRef) {
		t.Fatal("before the kubelet: want only the pinned image pinned")
	}

	k := startKubelet(t, d, imageGCFlags()...)
	// A static pod: the eviction manager, which the node's disk pressure
	// sets going (imageGCFlags), evicts no static pod.
	// Under that pressure the kubelet admits critical pods only, which a
	// static pod is. On the host's network: the daemon has no CNI config.
	used := staticPod("used", corev1.Container{Name: "c", Image: usedRef, ImagePullPolicy: corev1.PullIfNotPresent,
		Command: []string{"sh", "-c", sleepForever}})
	used.Spec.HostNetwork = true
	k.writeManifest(t, used)
	k.waitPod(t, "used", "Running", time.Minute, running)
	waitFor(t, "the kubelet's image GC to remove the unpinned image", 2*time.Minute, func() bool {
		return imageGone(t, d, otherRef)
	})
	// Once more with the pod running (a run before it may have come before
	// its container): the kubelet must not even try to remove its image,
	// which minicri would refuse (image in use).
	kubeletLog := func() string { log, _ := os.ReadFile(k.log); return string(log) }
	seen := len(kubeletLog())
	waitFor(t, "one more run of the kubelet's image GC", time.Minute, func() bool {
		return strings.Contains(kubeletLog()[seen:], "Attempting to delete unused images")
	})
	if imageGone(t, d, pinnedRef) {
		t.Fatalf("the kubelet's image GC removed the pinned image %s", pinnedRef)
	}
	if imageGone(t, d, usedRef) {
		t.Fatalf("the kubelet's image GC removed %s, which the running pod uses", usedRef)
	}
	if strings.Contains(kubeletLog()[seen:], "Removing image to free bytes\" imageID=\""+usedID) {
		t.Errorf("the kubelet's image GC tried to remove %s, which the running pod uses: it did not match the container's image to it", usedID)
	}
	if p := k.pod(t, "used"); p == nil || !running(p) || restartCounts(p)["c"] != 0 {
		t.Errorf("the pod of the image in use after the GC: %v, want running, never restarted", p)
	}
	if !imagePinned(t, d, pinnedRef) {
		t.Errorf("the pinned image %s is no longer reported pinned", pinnedRef)
	}
	log, err := os.ReadFile(k.log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), otherID) || strings.Contains(string(log), "Removing image to free bytes\" imageID=\""+pinnedID) {
		t.Errorf("the kubelet's log does not show it removing %s, or shows it removing the pinned %s:\n%s", otherID, pinnedID, k.logTail())
	}
}

func imagePinned(t *testing.T, d *Daemon, ref string) bool {
	return d.imageStatus(t, ref, false).GetImage().GetPinned()
}

func imageGone(t *testing.T, d *Daemon, ref string) bool {
	return d.imageStatus(t, ref, false).GetImage() == nil
}

// imageGCFlags make a test kubelet's image GC remove every unused image it
// may once it is a second old (the suite's configuration turns image GC
// off; flags win over it). Its periodic run (a GC threshold of 1% of the
// image filesystem) comes at start, before cAdvisor has the filesystem's
// capacity ("invalid capacity 0"), and then only every 5 minutes
// (ImageGCPeriod); so the node is also under disk pressure (less than 99%
// of it free), and the eviction manager, every 10 seconds, asks the same
// image GC to delete the unused images (DeleteUnusedImages). The test runs
// no pod to evict.
func imageGCFlags() []string {
	return []string{
		"--image-gc-high-threshold=1", "--image-gc-low-threshold=0", "--minimum-image-ttl-duration=1s",
		"--eviction-hard=nodefs.available<99%", "--eviction-pressure-transition-period=1s",
	}
}
