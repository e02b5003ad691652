package image

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	forEachOverlayForm(t, testRootfsIDMapped)
}

func testRootfsIDMapped(t *testing.T) {
	s := newTestStore(t, Options{Root: searchableTempDir(t)})
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
	for _, dir := range []string{s.root, s.path(snapshotsDir), s.rootfsDir("ctr1")} {
		checkSearchers(t, dir, testHostRoot)
	}
	if err := runAs(testHostRoot, "stat", root); err != nil {
		t.Errorf("the namespace's root cannot reach its rootfs: %v", err)
	}
	for uid, what := range map[int]string{65534: s.path(snapshotsDir, "ctr1"), testHostRoot: s.path(layersDir)} {
		if err := runAs(uid, "ls", what); err == nil {
			t.Errorf("uid %d can list %s", uid, what)
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
	for _, dir := range []string{s.root, s.path(snapshotsDir), s.rootfsDir("ctr1")} {
		checkSearchers(t, dir)
	}
}

// checkSearchers fails the test unless dir is closed to group and others
// and its ACL lets exactly uids search it.
func checkSearchers(t *testing.T, dir string, uids ...int) {
	t.Helper()
	got, err := searchers(dir)
	fi, serr := os.Stat(dir)
	if err != nil || serr != nil || !slices.Equal(got, uids) || fi.Mode().Perm()&0o067 != 0 {
		t.Errorf("%s: mode %v, ACL users %v (%v, %v); want closed to others, search for %v alone", dir, fi.Mode().Perm(), got, err, serr, uids)
	}
}

// searchableTempDir is a temp dir whose parents others may search, as
// /var/lib is for the state root.
func searchableTempDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runAs runs a command as uid (and gid), without supplementary groups.
func runAs(uid int, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// Two pods' rootfses: each root gets search on the shared dirs while its
// rootfs is mounted; the first unmount leaves the other's. A crash that
// left a grant without a mount, and dirs an older version made o+x, are
// repaired when the store opens.
func TestRootfsSearchACLs(t *testing.T) {
	requireRoot(t)
	parent := searchableTempDir(t)
	root := filepath.Join(parent, "image")
	s := newTestStore(t, Options{Root: root, PrivateParents: []string{parent}})
	img := importImages(t, s, map[string]v1.Image{"example.com/multi:1": tim.MultiLayer(t)})[0]
	const otherRoot = testHostRoot + 65536
	for _, id := range []string{"a", "b", "plain"} {
		if err := s.PrepareRootfs(id, img.ID); err != nil {
			t.Fatal(err)
		}
	}
	userns := testUserNS(t)
	for id, uid := range map[string]int{"a": testHostRoot, "b": otherRoot} {
		if _, err := s.MountRootfsIDMapped(id, IDMap{UserNS: userns, RootUID: uid, RootGID: uid}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.MountRootfs("plain"); err != nil {
		t.Fatal(err)
	}
	shared := []string{parent, s.root, s.path(snapshotsDir)}
	for _, dir := range shared {
		checkSearchers(t, dir, testHostRoot, otherRoot)
	}
	checkSearchers(t, s.rootfsDir("a"), testHostRoot)
	checkSearchers(t, s.rootfsDir("plain"))
	if err := runAs(otherRoot, "stat", filepath.Join(s.rootfsDir("a"), "merged")); err == nil {
		t.Error("one pod's root reaches another's rootfs")
	}
	if err := s.RemoveRootfs("a"); err != nil {
		t.Fatal(err)
	}
	for _, dir := range shared {
		checkSearchers(t, dir, otherRoot)
	}

	// A crash: b unmounted behind the store's back; an older version's o+x.
	if err := unix.Unmount(filepath.Join(s.rootfsDir("b"), "merged"), 0); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{s.root, s.rootfsDir("plain")} {
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	s = newTestStore(t, Options{Root: root, PrivateParents: []string{parent}})
	for _, dir := range append(shared, s.rootfsDir("b"), s.rootfsDir("plain")) {
		checkSearchers(t, dir)
	}
}

// The ACL the store writes reads back with the users it names.
func TestSearchACLRoundTrip(t *testing.T) {
	for _, uids := range [][]int{nil, {1}, {65536, 3 << 20}} {
		got, err := namedUsers(searchACL(uids))
		if err != nil || !slices.Equal(got, uids) {
			t.Errorf("namedUsers(searchACL(%v)) = %v, %v", uids, got, err)
		}
	}
	if _, err := namedUsers([]byte{2, 0, 0}); err == nil {
		t.Error("a truncated ACL parsed")
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
