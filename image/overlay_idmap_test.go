package image

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	tim "github.com/minicri/minicri/test/testimage"
)

const testHostRoot = 5 << 20

// testUserNS is a user namespace mapping 0-65535 to testHostRoot on, held
// by a process that the test kills at its end.
func testUserNS(t *testing.T) string {
	t.Helper()
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: testHostRoot, Size: 65536}}
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER, UidMappings: m, GidMappings: m}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/user"
}

// An idmapped rootfs shows the image's files with the namespace's host IDs
// (root's files as the namespace's root), never changes a layer, gives the
// upper dir to the namespace's root, and leaves no mount but its own.
func TestRootfsIDMapped(t *testing.T) {
	requireRoot(t)
	s := newTestStore(t, Options{})
	img := importImages(t, s, map[string]v1.Image{"example.com/multi:1": tim.MultiLayer(t)})[0]
	if err := s.PrepareRootfs("ctr1", img.ID); err != nil {
		t.Fatal(err)
	}
	root, err := s.MountRootfsIDMapped("ctr1", IDMap{UserNS: testUserNS(t), RootUID: testHostRoot, RootGID: testHostRoot})
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	for rel, want := range map[string]uint32{".": testHostRoot, "etc/motd": testHostRoot, "data/suid": testHostRoot + 1000} {
		if err := unix.Lstat(filepath.Join(root, rel), &st); err != nil || st.Uid != want || (rel != "data/suid" && st.Gid != testHostRoot) {
			t.Errorf("%s: owner %d:%d (%v), want uid %d", rel, st.Uid, st.Gid, err, want)
		}
	}
	// Writes: to the upper dir, as the writer (here the host's root).
	if err := os.WriteFile(filepath.Join(root, "etc", "motd"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, chain := range s.lowerDirs(mustRecord(t, s, "ctr1")) {
		if b, err := os.ReadFile(filepath.Join(chain, "etc", "motd")); err == nil && string(b) == "changed\n" {
			t.Errorf("a write reached the layer %s", chain)
		}
		if err := unix.Lstat(filepath.Join(chain, "etc"), &st); err == nil && st.Uid != 0 {
			t.Errorf("layer %s owned by %d: a layer was chowned", chain, st.Uid)
		}
	}
	if m := mountsBelow(t, s.Root()); len(m) != 1 || m[0] != root {
		t.Errorf("mounts below the store: %v, want only %s (the idmapped layers stay out of sight)", m, root)
	}
	if fi, err := os.Stat(s.rootfsDir("ctr1")); err != nil || fi.Mode().Perm()&0o004 != 0 {
		t.Errorf("rootfs dir mode %v (%v), want not readable by others", fi.Mode().Perm(), err)
	}
	for _, dir := range []string{s.root, s.path(snapshotsDir), s.rootfsDir("ctr1")} {
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm()&0o001 == 0 {
			t.Errorf("%s: mode %v (%v), want searchable by others", dir, fi.Mode().Perm(), err)
		}
	}
	if fi, err := os.Stat(s.path(layersDir)); err != nil || fi.Mode().Perm()&0o007 != 0 {
		t.Errorf("layers dir mode %v (%v), want closed to others", fi.Mode().Perm(), err)
	}
	if err := s.UnmountRootfs("ctr1"); err != nil {
		t.Fatal(err)
	}
	if m := mountsBelow(t, s.Root()); len(m) != 0 {
		t.Errorf("mounts left after UnmountRootfs: %v", m)
	}
}

func mustRecord(t *testing.T, s *Store, id string) rootfsRecord {
	t.Helper()
	rec, err := s.readRootfsRecord(id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}
