//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// The kubelet's image garbage collection removes every unused image it may
// but a pinned one (image.pinned_images): the kubelet reads pinned: true
// from ListImages and passes the image over. It is told to remove every
// unused image (imageGCFlags); the unpinned image going is the proof that
// it ran.
func TestKubeletImageGCKeepsPinnedImages(t *testing.T) {
	kubeletBinary(t)
	reg := registry.Start(t, registry.Options{})
	pinnedRef, otherRef := reg.Host()+"/e2e/pinned:1", reg.Host()+"/e2e/other:1"
	testimage.Push(t, testimage.Busybox(t, testimage.WithLabels(map[string]string{"which": "pinned"})), pinnedRef)
	testimage.Push(t, testimage.Busybox(t, testimage.WithLabels(map[string]string{"which": "other"})), otherRef)
	d := StartDaemon(t, WithConfig(fmt.Sprintf("[image.pinned_images]\nkeep = %q\n", pinnedRef)))
	pinnedID, otherID := d.pull(t, pinnedRef), d.pull(t, otherRef)
	if pinnedID == otherID {
		t.Fatal("the two test images are one")
	}
	if !imagePinned(t, d, pinnedRef) || imagePinned(t, d, otherRef) {
		t.Fatal("before the kubelet: want only the pinned image pinned")
	}

	k := startKubelet(t, d, imageGCFlags()...)
	waitFor(t, "the kubelet's image GC to remove the unpinned image", 2*time.Minute, func() bool {
		return imageGone(t, d, otherRef)
	})
	if imageGone(t, d, pinnedRef) {
		t.Fatalf("the kubelet's image GC removed the pinned image %s", pinnedRef)
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
