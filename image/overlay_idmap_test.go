package image

import (
	"encoding/binary"
	"errors"
	"fmt"
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
		checkPrivate(t, dir)
	}
	// The host uid the namespace's root maps to is a host user like any
	// other: its runtime finds the rootfs on a stage of its own
	// (server/container_userns.go), not through the store.
	for uid, what := range map[int]string{testHostRoot: root, 65534: s.path(snapshotsDir, "ctr1")} {
		if err := runAs(uid, "stat", what); err == nil {
			t.Errorf("uid %d reaches %s", uid, what)
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
		checkPrivate(t, dir)
	}
}

// checkPrivate fails the test unless dir is 0700 without an ACL.
func checkPrivate(t *testing.T, dir string) {
	t.Helper()
	_, err := unix.Getxattr(dir, aclXattr, make([]byte, 256))
	fi, serr := os.Stat(dir)
	if !errors.Is(err, unix.ENODATA) || serr != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: mode %v, ACL read %v (%v); want 0700 and no ACL", dir, fi.Mode().Perm(), err, serr)
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

// What an older version left on the way to the rootfses (search ACL
// entries for pod roots, o+x) is taken off when the store opens, mounted
// rootfses or not.
func TestOlderSearchACLsRemoved(t *testing.T) {
	requireRoot(t)
	parent := searchableTempDir(t)
	root := filepath.Join(parent, "image")
	s := newTestStore(t, Options{Root: root, PrivateParents: []string{parent}})
	img := importImages(t, s, map[string]v1.Image{"example.com/multi:1": tim.MultiLayer(t)})[0]
	for _, id := range []string{"mapped", "plain"} {
		if err := s.PrepareRootfs(id, img.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.MountRootfsIDMapped("mapped", IDMap{UserNS: testUserNS(t), RootUID: testHostRoot, RootGID: testHostRoot}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.UnmountRootfs("mapped") })
	dirs := []string{parent, s.root, s.path(snapshotsDir), s.rootfsDir("mapped"), s.rootfsDir("plain")}
	for i, dir := range dirs {
		if i == len(dirs)-1 {
			if err := os.Chmod(dir, 0o711); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := unix.Setxattr(dir, aclXattr, olderSearchACL(testHostRoot), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, searchACLLockName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := runAs(testHostRoot, "stat", s.RootfsPath("mapped")); err != nil {
		t.Fatalf("the older ACLs do not let the pod's root in, the test proves nothing: %v", err)
	}
	newTestStore(t, Options{Root: root, PrivateParents: []string{parent}})
	for _, dir := range dirs {
		checkPrivate(t, dir)
	}
	if err := runAs(testHostRoot, "stat", s.RootfsPath("mapped")); err == nil {
		t.Error("the pod's root still reaches its rootfs through the store")
	}
	if _, err := os.Stat(filepath.Join(root, searchACLLockName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the older versions' ACL lock is left: %v", err)
	}
}

// TestMaskedACLKeepsADirPrivate is why removeSearchACLs skips a 0700 dir
// without reading its ACL: an ACL's named entries are under its mask, which
// the group bits show, so a dir whose mode reads 0700 lets no host uid in,
// whatever entries it holds.
func TestMaskedACLKeepsADirPrivate(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(searchableTempDir(t), "private")
	if err := os.MkdirAll(filepath.Join(dir, "inner"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(dir, aclXattr, olderSearchACL(testHostRoot), 0); err != nil {
		t.Fatal(err)
	}
	if err := runAs(testHostRoot, "stat", filepath.Join(dir, "inner")); err != nil {
		t.Fatalf("the search ACL does not let the uid in, the test proves nothing: %v", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil { // the mask to nothing, the named entry kept
		t.Fatal(err)
	}
	if _, err := unix.Getxattr(dir, aclXattr, make([]byte, 256)); err != nil {
		t.Fatalf("the chmod dropped the ACL, the test proves nothing: %v", err)
	}
	if err := runAs(testHostRoot, "stat", filepath.Join(dir, "inner")); err == nil {
		t.Error("a 0700 dir with a named search entry let its uid in")
	}
}

// olderSearchACL is the access ACL older versions wrote: rwx for the
// owner, search for uid, nothing for group and others, a --x mask
// (include/uapi/linux/posix_acl_xattr.h).
func olderSearchACL(uid uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{0x01, 7, ^uint32(0)}, {0x02, 1, uid}, {0x04, 0, ^uint32(0)}, {0x10, 1, ^uint32(0)}, {0x20, 0, ^uint32(0)}} {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

func mustRecord(t *testing.T, s *Store, id string) rootfsRecord {
	t.Helper()
	rec, err := s.readRootfsRecord(id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}
