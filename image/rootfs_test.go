package image

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/kernelfeat"
	tim "github.com/minicri/minicri/test/testimage"
)

// TestRootfsShowsTheLayerFormat mounts the multi-layer image and looks at
// the merged tree: whiteouts applied, the opaque dir hiding the layer
// below, links, devices and modes kept, writes going to the upper dir.
func TestRootfsShowsTheLayerFormat(t *testing.T) {
	requireRoot(t)
	s := newTestStore(t, Options{})
	img := importImages(t, s, map[string]v1.Image{"example.com/multi:1": tim.MultiLayer(t)})[0]
	if err := s.PrepareRootfs("ctr1", img.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.PrepareRootfs("ctr1", img.ID); err != nil {
		t.Fatalf("prepare again: %v", err)
	}
	root, err := s.MountRootfs("ctr1")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := s.MountRootfs("ctr1"); err != nil || again != root {
		t.Fatalf("mount again: %s, %v", again, err)
	}
	p := func(rel string) string { return filepath.Join(root, rel) }
	for _, gone := range []string{"data/gone", "opq/old"} {
		if _, err := os.Lstat(p(gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is visible (err %v): the whiteout/opaque dir was not applied", gone, err)
		}
	}
	for rel, want := range map[string]string{"data/keep": "keep\n", "opq/new": "new\n", "data/hard": "linked\n", "etc/motd": "hello from the top layer\n"} {
		if b, err := os.ReadFile(p(rel)); err != nil || string(b) != want {
			t.Errorf("%s = %q (%v), want %q", rel, b, err, want)
		}
	}
	if target, err := os.Readlink(p("data/link")); err != nil || target != "/etc/motd" {
		t.Errorf("data/link → %q (%v)", target, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(p("data/null"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 1 || unix.Minor(st.Rdev) != 3 {
		t.Errorf("data/null: mode %o rdev %d:%d (%v), want char 1:3", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), err)
	}
	if err := unix.Lstat(p("data/suid"), &st); err != nil || st.Mode&0o7777 != 0o4755 || st.Uid != 1000 {
		t.Errorf("data/suid: mode %o uid %d (%v), want 4755 uid 1000", st.Mode&0o7777, st.Uid, err)
	}
	if target, err := os.Readlink(p("bin/sh")); err != nil || target != "busybox" {
		t.Errorf("bin/sh → %q (%v)", target, err)
	}
	if err := os.WriteFile(p("tmp/written"), []byte("w"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.rootfsDir("ctr1"), "upper", "tmp", "written")); err != nil {
		t.Errorf("a write in the rootfs did not reach the upper dir: %v", err)
	}

	if err := s.UnmountRootfs("ctr1"); err != nil {
		t.Fatal(err)
	}
	if err := s.UnmountRootfs("ctr1"); err != nil {
		t.Fatalf("unmount again: %v", err)
	}
	if mounted, _ := isMountpoint(root); mounted {
		t.Fatal("still mounted after UnmountRootfs")
	}
	if ids := s.Rootfses(); len(ids) != 1 || ids[0] != "ctr1" {
		t.Fatalf("Rootfses = %v, want [ctr1]", ids)
	}
	// A half-made rootfs (no record) is listed too, for the daemon's sweep
	// to remove; what is no rootfs ID (a stray file, a dot dir) is not.
	for _, dir := range []string{"ctr0/upper", ".stray"} {
		if err := os.MkdirAll(filepath.Join(s.path(snapshotsDir), dir), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(s.path(snapshotsDir), "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if ids := s.Rootfses(); !slices.Equal(ids, []string{"ctr0", "ctr1"}) {
		t.Fatalf("Rootfses = %v, want [ctr0 ctr1]", ids)
	}
	if err := s.RemoveRootfs("ctr0"); err != nil {
		t.Fatalf("remove a half-made rootfs: %v", err)
	}
	if _, err := os.Lstat(s.rootfsDir("ctr0")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the half-made rootfs is left: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(s.path(snapshotsDir), ".stray")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(s.path(snapshotsDir), "file")); err != nil {
		t.Fatal(err)
	}
	// A mounted rootfs is unmounted by its removal.
	if _, err := s.MountRootfs("ctr1"); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveRootfs("ctr1"); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveRootfs("ctr1"); err != nil {
		t.Fatalf("remove again: %v", err)
	}
	if _, err := os.Lstat(s.rootfsDir("ctr1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("rootfs dir left: %v", err)
	}
	if _, err := s.MountRootfs("ctr1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("mount of a removed rootfs = %v, want ErrNotFound", err)
	}
}

func TestPrepareRootfsErrors(t *testing.T) {
	s := newTestStore(t, Options{})
	imgs := importImages(t, s, map[string]v1.Image{"example.com/a:1": tim.Busybox(t), "example.com/b:1": tim.Busybox(t, tim.WithCmd("b"))})
	if err := s.PrepareRootfs("c", "example.com/nothing:1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("prepare for an unknown image = %v, want ErrNotFound", err)
	}
	if err := s.PrepareRootfs("c", imgs[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := s.PrepareRootfs("c", imgs[1].ID); !errors.Is(err, ErrExists) {
		t.Errorf("prepare of one ID for another image = %v, want ErrExists", err)
	}
	for _, bad := range []string{"", "../x", "a/b", ".hidden", string(make([]byte, 200))} {
		if err := s.PrepareRootfs(bad, imgs[0].ID); err == nil {
			t.Errorf("prepare with ID %q succeeded", bad)
		}
	}
}

// TestRootfsOfManyLayers mounts an image of 120 layers (their absolute
// paths would not fit in the classic mount's page) and checks every layer
// shows, the top one winning: with "lowerdir+" (this host, 6.18) and with
// the classic mount of a kernel before 6.8 (the guest's 6.1).
func TestRootfsOfManyLayers(t *testing.T) {
	requireRoot(t)
	forEachOverlayForm(t, testRootfsOfManyLayers)
}

// forEachOverlayForm runs test with the overlay made by "lowerdir+" (a
// kernel from 6.8) and by the classic mount (before: the probe forced).
func forEachOverlayForm(t *testing.T, test func(t *testing.T)) {
	for _, plus := range []bool{true, false} {
		name := "lowerdir+ (6.8 and later)"
		if !plus {
			name = "classic lowerdir= (before 6.8)"
		}
		t.Run(name, func(t *testing.T) {
			if plus && !kernelfeat.OverlayLowerdirPlus.Supported() {
				t.Skipf("this kernel has no lowerdir+: %v", kernelfeat.OverlayLowerdirPlus.Get())
			}
			defer kernelfeat.OverlayLowerdirPlus.Force(plus, "forced by the test")()
			test(t)
		})
	}
}

func testRootfsOfManyLayers(t *testing.T) {
	const n = 120
	layers := []v1.Layer{tim.BusyboxLayer(t)}
	for i := 1; i < n; i++ {
		layers = append(layers, tim.Layer(t,
			tim.File(fmt.Sprintf("layers/%03d", i), "x", 0o644),
			tim.File("layers/top", fmt.Sprint(i), 0o644)))
	}
	s := newTestStore(t, Options{})
	img := importImages(t, s, map[string]v1.Image{"example.com/tall:1": tim.Image(t, layers)})[0]
	if len(img.Layers) != n {
		t.Fatalf("image has %d layers, want %d", len(img.Layers), n)
	}
	if err := s.PrepareRootfs("tall", img.ID); err != nil {
		t.Fatal(err)
	}
	root, err := s.MountRootfs("tall")
	if err != nil {
		t.Fatalf("mount %d layers: %v", n, err)
	}
	entries, err := os.ReadDir(filepath.Join(root, "layers"))
	if err != nil || len(entries) != n { // n-1 numbered files and "top"
		t.Fatalf("layers/ has %d entries (%v), want %d", len(entries), err, n)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "layers/top")); string(b) != fmt.Sprint(n-1) {
		t.Fatalf("layers/top = %q, want the top layer's %d", b, n-1)
	}
}

// TestRootfsLegacyMount forces the classic mount(2) path (kernels before
// 6.8) and mounts through the short layer links.
func TestRootfsLegacyMount(t *testing.T) {
	requireRoot(t)
	defer kernelfeat.OverlayLowerdirPlus.Force(false, "kernel before 6.8")()
	s := newTestStore(t, Options{})
	img := importImages(t, s, map[string]v1.Image{"example.com/multi:1": tim.MultiLayer(t)})[0]
	if err := s.PrepareRootfs("legacy", img.ID); err != nil {
		t.Fatal(err)
	}
	root, err := s.MountRootfs("legacy")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "opq/new")); err != nil || string(b) != "new\n" {
		t.Fatalf("opq/new = %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "data/gone")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("whiteout not applied: %v", err)
	}
	if links := dirNames(t, s.path(linksDir)); len(links) != len(img.Layers) {
		t.Fatalf("short links %v, want one per layer", links)
	}
}

// TestRootfsOfEmptyImage: an image without layers still mounts (overlay
// needs a lower dir).
func TestRootfsOfEmptyImage(t *testing.T) {
	requireRoot(t)
	s := newTestStore(t, Options{})
	img := importImages(t, s, map[string]v1.Image{"example.com/scratch:1": tim.Image(t, nil)})[0]
	if err := s.PrepareRootfs("scratch", img.ID); err != nil {
		t.Fatal(err)
	}
	root, err := s.MountRootfs("scratch")
	if err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(root); err != nil || len(entries) != 0 {
		t.Fatalf("empty image rootfs: %v entries, %v", len(entries), err)
	}
}

// TestImageVolumeIsReadOnlyAndPinsTheImage: an image volume shows the
// image's files through a read-only overlay without an upper dir, of one
// layer as of many, and keeps the image from removal until it goes.
func TestImageVolumeIsReadOnlyAndPinsTheImage(t *testing.T) {
	requireRoot(t)
	forEachOverlayForm(t, testImageVolumes)
}

func testImageVolumes(t *testing.T) {
	s := newTestStore(t, Options{})
	imgs := importImages(t, s, map[string]v1.Image{
		"example.com/multi:1":   tim.MultiLayer(t),
		"example.com/one:1":     tim.Image(t, []v1.Layer{tim.Layer(t, tim.Dir("data", 0o755), tim.File("data/hello", "hi\n", 0o644))}),
		"example.com/scratch:1": tim.Image(t, nil),
	})
	for _, img := range imgs {
		id := "vol-" + img.ID[len("sha256:"):len("sha256:")+8]
		if err := s.PrepareImageVolume(id, img.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.PrepareRootfs(id, img.ID); !errors.Is(err, ErrExists) {
			t.Fatalf("a rootfs under an image volume's ID: %v, want ErrExists", err)
		}
		root, err := s.MountRootfs(id)
		if err != nil {
			t.Fatal(err)
		}
		dataDir := filepath.Join(root, "data")
		if len(img.Layers) == 0 {
			dataDir = root
		} else if entries, err := os.ReadDir(dataDir); err != nil || len(entries) == 0 {
			t.Fatalf("data/ of image %s: %d entries, %v", img.RepoTags, len(entries), err)
		}
		if err := os.WriteFile(filepath.Join(dataDir, "new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
			t.Fatalf("write into image volume: %v, want EROFS", err)
		}
		if _, err := os.Stat(filepath.Join(s.rootfsDir(id), "upper")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("an image volume has an upper dir (%v)", err)
		}
		if err := s.Remove(img.ID); !errors.Is(err, ErrInUse) {
			t.Fatalf("remove image under a volume: %v, want ErrInUse", err)
		}
		if err := s.RemoveRootfs(id); err != nil {
			t.Fatal(err)
		}
		if mounts := mountsBelow(t, s.path(snapshotsDir)); len(mounts) != 0 {
			t.Fatalf("mounts left: %v", mounts)
		}
		if err := s.Remove(img.ID); err != nil {
			t.Fatalf("remove image after its volume went: %v", err)
		}
	}
}

// A rootfs whose record is gone but whose overlay is still mounted (a crash
// between the two) is unmounted before its dir is deleted: a RemoveAll
// through the mount would delete the container's files one by one, and fail
// on the mountpoint.
func TestHalfMadeRootfsIsUnmountedBeforeItIsDeleted(t *testing.T) {
	requireRoot(t)
	s := newTestStore(t, Options{})
	img := importImages(t, s, map[string]v1.Image{"example.com/multi:1": tim.MultiLayer(t)})[0]
	if err := s.PrepareRootfs("ctr1", img.ID); err != nil {
		t.Fatal(err)
	}
	root, err := s.MountRootfs("ctr1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	if err := os.Remove(filepath.Join(s.rootfsDir("ctr1"), rootfsRecordName)); err != nil {
		t.Fatal(err)
	}
	if err := s.sweep(); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	if mounted, err := isMountpoint(root); err == nil && mounted {
		t.Fatalf("%s is still mounted after the half-made rootfs was swept", root)
	}
	if _, err := os.Lstat(s.rootfsDir("ctr1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("half-made rootfs dir still there (err %v)", err)
	}
}
