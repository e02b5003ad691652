package image

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// Older versions let the root of each user-namespaced pod search the way
// down to its rootfs, with POSIX ACL entries on the store's directories
// (and before that with o+x): the runtime resolved the rootfs's path as
// that root, a host uid. The runtime now finds such a rootfs on a stage of
// its own mount namespace (server/container_userns.go), and no host uid a
// pod is mapped onto may enter any directory of the store.
const (
	aclXattr          = "system.posix_acl_access"
	searchACLLockName = "acl.lock" // the older versions' flock of ACL changes
)

// removeSearchACLs, at start-up, makes the way to the rootfses private
// again: every directory an older version opened (the private parents,
// the store's root, snapshots/ and each rootfs dir) 0700 without an ACL.
func (s *Store) removeSearchACLs() error {
	dirs := append(slices.Clone(s.opts.PrivateParents), s.root, s.path(snapshotsDir))
	entries, err := os.ReadDir(s.path(snapshotsDir))
	if err != nil {
		return fmt.Errorf("image store repair: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join(s.path(snapshotsDir), e.Name()))
		}
	}
	for _, dir := range dirs {
		// 0700 is private whatever ACL the dir has: with an ACL of named
		// entries the group bits are its mask, and a mask of nothing grants
		// them nothing. A stat is what a restart pays for each rootfs dir;
		// the xattr removal and the chmod would write every inode again.
		if fi, err := os.Lstat(dir); err == nil && fi.IsDir() && fi.Mode()&(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky) == 0o700 {
			continue
		}
		err := unix.Removexattr(dir, aclXattr)
		if err != nil && !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("image store repair: remove ACL of %s: %w", dir, err)
		}
		// Written either way: the ACL's mask was the group bits, and an
		// older version's chmod may have widened it.
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("image store repair: %w", err)
		}
	}
	if err := os.Remove(s.path(searchACLLockName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("image store repair: %w", err)
	}
	return nil
}
