package image

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	tim "github.com/minicri/minicri/test/testimage"
)

// hostDir is a directory of the host that an image's link names: its
// entries' names must never come out of a walk of a rootfs.
func hostDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "y", "host-secret-below"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "host-secret-name"), bytes.Repeat([]byte("x"), 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRootfsDiffFollowsNoLinkOfTheImage: an image ships links to a host
// directory (h at the top, x in the top layer over a directory x of the
// layer below); the container deletes h and makes a directory there, and
// its upper dir has an opaque x/y. deleted.files lists no entry of the
// host directory, and nothing of the layer the link hides.
func TestRootfsDiffFollowsNoLinkOfTheImage(t *testing.T) {
	host := hostDir(t)
	s := newTestStore(t, Options{})
	img := tim.Image(t, []v1.Layer{
		tim.Layer(t, tim.Dir("x", 0o755), tim.Dir("x/y", 0o755), tim.File("x/y/below", "hidden by the link above\n", 0o644)),
		tim.Layer(t, tim.Symlink("h", host), tim.Symlink("x", host)),
	})
	imported := importImages(t, s, map[string]v1.Image{"example.com/links:1": img})[0]
	root := prepareMounted(t, s, "ctr", imported.ID)
	if err := os.Remove(filepath.Join(root, "h")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "h"), 0o755); err != nil {
		t.Fatal(err)
	}
	// An opaque x/y below a non-opaque x: what the upper dir of a container
	// that deleted and remade x/y over a directory x would hold, here over
	// the image's link x.
	if err := unix.Unmount(root, 0); err != nil {
		t.Fatal(err)
	}
	upperY := filepath.Join(s.upperDir("ctr"), "x", "y")
	if err := os.MkdirAll(upperY, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(upperY, opaqueXattr, []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	var diff bytes.Buffer
	deleted, err := s.WriteRootfsDiff("ctr", &diff, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deleted {
		if strings.Contains(d, "host-secret") || strings.Contains(d, "below") {
			t.Errorf("deleted.files lists %s, through a link of the image (all: %v)", d, deleted)
		}
	}
	for name := range tarEntries(t, diff.Bytes()) {
		if strings.Contains(name, "host-secret") {
			t.Errorf("the diff holds %s, of the host directory", name)
		}
	}
}

// TestUsageWalkFollowsNoLink: a container's upper dir with a link to a
// host directory of 1 MiB counts the link, not the directory's files.
func TestUsageWalkFollowsNoLink(t *testing.T) {
	host := hostDir(t)
	upper := t.TempDir()
	if err := os.Symlink(host, filepath.Join(upper, "h")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(upper, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(upper, "d", "h")); err != nil {
		t.Fatal(err)
	}
	bytes, inodes, err := diskUsage(upper)
	if err != nil {
		t.Fatal(err)
	}
	if bytes >= 1<<20 || inodes != 4 {
		t.Errorf("usage = %d bytes, %d inodes; want under 1 MiB and 4 inodes (the dirs and the links, not the host's files)", bytes, inodes)
	}
	if _, _, err := diskUsage(filepath.Join(upper, "h")); err == nil {
		t.Errorf("a walk from a link to a directory followed it")
	}
}
