package image

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// The runtime resolves a user-namespaced container's rootfs path as the
// pod's root, an unprivileged host uid without any capability over the
// store's directories, which are root's and 0700. Rather than open them to
// every host user (o+x), each directory on the way down to a rootfs (the
// private parents, the store's root, snapshots/ and the rootfs's own dir)
// gets an access ACL entry granting search (--x) to exactly the pod roots
// whose rootfses are mounted: nobody else enters, and the pod's root can
// neither list them nor enter another rootfs's dir. A rootfs dir's own
// entry says whose it is; the shared directories' entries are recomputed
// from those (syncSearchACLs), so a crash between two steps is repaired by
// the next sync (New does one).

// POSIX ACL xattr format (include/uapi/linux/posix_acl_xattr.h): a version
// header, then (tag, perm, id) entries sorted by tag, then id.
const (
	aclXattr       = "system.posix_acl_access"
	aclVersion     = 2
	aclUserObj     = 0x01
	aclUser        = 0x02
	aclGroupObj    = 0x04
	aclMask        = 0x10
	aclOther       = 0x20
	aclUndefinedID = 0xffffffff
	aclEntrySize   = 8
)

// searchACLLockName is the flock of every ACL change: several Stores (the
// daemon, the image CLI) may share a root, and an ACL update is a
// read-compute-write of a whole xattr.
const searchACLLockName = "acl.lock"

// searchACL encodes the access ACL of a private dir (rwx for its owner,
// nothing for its group and others) that lets uids search it. The mask
// (--x) caps the named entries at search, whatever a chmod does later.
func searchACL(uids []int) []byte {
	b := binary.LittleEndian.AppendUint32(nil, aclVersion)
	entry := func(tag, perm uint16, id uint32) {
		b = binary.LittleEndian.AppendUint16(b, tag)
		b = binary.LittleEndian.AppendUint16(b, perm)
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	entry(aclUserObj, 7, aclUndefinedID)
	for _, uid := range uids {
		entry(aclUser, 1, uint32(uid))
	}
	entry(aclGroupObj, 0, aclUndefinedID)
	entry(aclMask, 1, aclUndefinedID)
	entry(aclOther, 0, aclUndefinedID)
	return b
}

// namedUsers parses an access ACL and returns the uids it names.
func namedUsers(b []byte) ([]int, error) {
	if len(b) < 4 || (len(b)-4)%aclEntrySize != 0 || binary.LittleEndian.Uint32(b) != aclVersion {
		return nil, errors.New("malformed POSIX ACL")
	}
	var uids []int
	for e := b[4:]; len(e) > 0; e = e[aclEntrySize:] {
		if binary.LittleEndian.Uint16(e) == aclUser {
			uids = append(uids, int(binary.LittleEndian.Uint32(e[4:])))
		}
	}
	return uids, nil
}

// searchers returns the uids dir's access ACL names; none when it has no ACL.
func searchers(dir string) ([]int, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Getxattr(dir, aclXattr, buf)
		switch {
		case errors.Is(err, unix.ENODATA):
			return nil, nil
		case errors.Is(err, unix.ERANGE):
			buf = make([]byte, 2*len(buf))
			continue
		case err != nil:
			return nil, fmt.Errorf("read ACL of %s: %w", dir, err)
		}
		uids, err := namedUsers(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("ACL of %s: %w", dir, err)
		}
		return uids, nil
	}
}

// setSearchers makes dir 0700 with search for exactly uids: no ACL at all
// when there are none (a chmod after removing it, as the group bits held
// the mask).
func setSearchers(dir string, uids []int) error {
	if len(uids) == 0 {
		if err := unix.Removexattr(dir, aclXattr); err != nil && !errors.Is(err, unix.ENODATA) {
			return fmt.Errorf("remove ACL of %s: %w", dir, err)
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("make %s private: %w", dir, err)
		}
		return nil
	}
	if err := unix.Setxattr(dir, aclXattr, searchACL(uids), 0); err != nil {
		return fmt.Errorf("let uids %v search %s (a filesystem with POSIX ACLs is needed for pods in a user namespace): %w", uids, dir, err)
	}
	return nil
}

// searchPath lists the shared directories above the rootfs dirs, top first.
func (s *Store) searchPath() []string {
	return append(slices.Clone(s.opts.PrivateParents), s.root, s.path(snapshotsDir))
}

// grantSearch lets uid reach rootfs id: its dir and every dir above it, up
// to the private parents. The caller holds the ACL lock.
func (s *Store) grantSearch(id string, uid int) error {
	if err := setSearchers(s.rootfsDir(id), []int{uid}); err != nil {
		return err
	}
	return s.syncSearchACLs()
}

// revokeSearch undoes grantSearch: rootfs id is no longer mounted. A dir
// that is gone has nothing to revoke. The caller holds the ACL lock.
func (s *Store) revokeSearch(id string) error {
	dir := s.rootfsDir(id)
	uids, err := searchers(dir)
	if errors.Is(err, unix.ENOENT) || err == nil && len(uids) == 0 {
		return nil
	}
	if err != nil {
		return err
	}
	if err := setSearchers(dir, nil); err != nil {
		return err
	}
	return s.syncSearchACLs()
}

// syncSearchACLs sets the shared directories' ACLs to the union of the
// rootfs dirs' own: search for the root of each pod with a mounted
// rootfs, for no one else. The caller holds the ACL lock.
func (s *Store) syncSearchACLs() error {
	entries, err := os.ReadDir(s.path(snapshotsDir))
	if err != nil {
		return fmt.Errorf("rootfs search ACLs: %w", err)
	}
	var all []int
	for _, e := range entries {
		uids, err := searchers(filepath.Join(s.path(snapshotsDir), e.Name()))
		if errors.Is(err, unix.ENOENT) {
			continue // removed meanwhile (the removal does not lock)
		}
		if err != nil {
			return err
		}
		all = append(all, uids...)
	}
	slices.Sort(all)
	all = slices.Compact(all)
	for _, dir := range s.searchPath() {
		if err := setSearchers(dir, all); err != nil {
			return err
		}
	}
	return nil
}

// lockSearchACLs takes the ACL lock; the returned func releases it.
func (s *Store) lockSearchACLs() (func(), error) {
	f, err := lockFile(s.path(searchACLLockName), unix.LOCK_EX)
	if err != nil {
		return nil, fmt.Errorf("image store ACL lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// repairSearchACLs, at start-up, makes the path to the rootfses private
// again: every rootfs dir 0700 (older versions made a user-namespaced
// pod's o+x), its ACL kept only while it is mounted, and the shared
// directories' ACLs recomputed (a crash may have left them wider, and
// older versions made them o+x).
func (s *Store) repairSearchACLs() error {
	unlock, err := s.lockSearchACLs()
	if err != nil {
		return err
	}
	defer unlock()
	entries, err := os.ReadDir(s.path(snapshotsDir))
	if err != nil {
		return fmt.Errorf("image store repair: %w", err)
	}
	for _, e := range entries {
		dir := filepath.Join(s.path(snapshotsDir), e.Name())
		uids, err := searchers(dir)
		if err != nil {
			return fmt.Errorf("image store repair: %w", err)
		}
		mounted, err := isMountpoint(filepath.Join(dir, "merged"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("image store repair: %w", err)
		}
		if !mounted {
			uids = nil
		}
		// Written again either way: a chmod (an older version's o+x)
		// may have widened it.
		if err := setSearchers(dir, uids); err != nil {
			return fmt.Errorf("image store repair: %w", err)
		}
	}
	if err := s.syncSearchACLs(); err != nil {
		return fmt.Errorf("image store repair: %w", err)
	}
	return nil
}
