//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sirupsen/logrus"

	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// TestCheckpointRootfsDiffOfAnAttackersContainer: an image ships /h, a link
// to a host directory; its container deletes /h, makes a directory there
// and writes a sparse file of 1 GiB holding one block. The checkpoint's
// rootfs diff, written by the daemon's own code (image.Store's
// WriteRootfsDiff, on the real overlay rootfs the daemon made for the
// container: CRIU cannot dump on this host, so CheckpointContainer stops
// before its diff) lists none of the host directory's entries in its
// deleted files, and is some KiB, not 1 GiB, with the file whole in it.
func TestCheckpointRootfsDiffOfAnAttackersContainer(t *testing.T) {
	host := t.TempDir()
	for _, name := range []string{"other-pods-volume", "other-pods-secret"} {
		if err := os.WriteFile(filepath.Join(host, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := StartDaemon(t)
	d.bridgeNetwork(t)
	reg := registry.Start(t, registry.Options{})
	img := testimage.Image(t, []v1.Layer{testimage.BusyboxLayer(t), testimage.Layer(t, testimage.Symlink("h", host))})
	ref := d.pull(t, pushImage(t, reg, "linked:1", img).ref)
	pod := d.podConfig("rootfs-diff")
	podID := d.runPod(t, pod)
	id := d.startContainer(t, podID, pod, containerConfig("attacker", ref, "sh", "-c",
		"rm /h && mkdir /h && echo mine > /h/mine && dd if=/dev/zero of=/big bs=4096 count=1 seek=262143 2>/dev/null && echo ready > /tmp/ready; sleep 3600"))
	waitFor(t, "the container to plant its files", 30*time.Second, func() bool {
		out, _ := d.execSync(t, id, "cat", "/tmp/ready")
		return strings.TrimSpace(out) == "ready"
	})

	st, err := image.Open(image.Options{Root: filepath.Join(d.Root, "image"), Log: logrus.New()})
	if err != nil {
		t.Fatal(err)
	}
	diffPath := filepath.Join(t.TempDir(), "rootfs-diff.tar")
	f, err := os.Create(diffPath)
	if err != nil {
		t.Fatal(err)
	}
	deleted, err := st.WriteRootfsDiff(id, f, nil)
	f.Close()
	if err != nil {
		t.Fatalf("WriteRootfsDiff of the container: %v", err)
	}
	for _, p := range deleted {
		if strings.Contains(p, "other-pods") {
			t.Errorf("deleted.files lists %s, an entry of the host directory the image's link names (all: %v)", p, deleted)
		}
	}
	fi, err := os.Stat(diffPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 1<<20 {
		t.Errorf("rootfs-diff.tar is %d bytes for a container that wrote some KiB", fi.Size())
	}
	found := rootfsDiffSizes(t, diffPath)
	for name := range found {
		if strings.Contains(name, "other-pods") {
			t.Errorf("rootfs-diff.tar holds %s", name)
		}
	}
	if found["big"] != 1<<30 || found["h/mine"] != 5 {
		t.Errorf("rootfs-diff.tar entries %v, want big of 1 GiB (read back whole) and h/mine", found)
	}
}
