package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/atomicfile"
)

// ErrExists: a rootfs with this ID exists already, for another image.
var ErrExists = errors.New("already exists")

// A rootfs (snapshot) is snapshots/<id>/ with upper/, work/, merged/ and
// rootfs.json, the record. The record is written last: a directory without
// one is half-made and garbage-collected.
const rootfsRecordName = "rootfs.json"

type rootfsRecord struct {
	ID       string    `json:"id"`
	ImageID  string    `json:"imageID"`
	ChainIDs []string  `json:"chainIDs"` // the image's layers, bottom first
	Created  time.Time `json:"created"`
	// ReadOnly: an image volume, the image's layers alone with no upper
	// dir (snapshots/<id>/ then has merged/ and the record only).
	ReadOnly bool `json:"readOnly,omitempty"`
}

// unmountAttempts bounds the loop that peels stacked mounts off merged/.
const unmountAttempts = 8

// validRootfsID keeps IDs to one path element of safe characters.
func validRootfsID(id string) error {
	if id == "" || len(id) > 128 || id[0] == '.' || id[0] == '-' {
		return fmt.Errorf("invalid rootfs ID %q", id)
	}
	for _, c := range id {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return fmt.Errorf("invalid rootfs ID %q", id)
		}
	}
	return nil
}

func (s *Store) rootfsDir(id string) string { return s.path(snapshotsDir, id) }

// PrepareRootfs makes the writable layer of container id on top of image
// imageID (an ID or any reference Get accepts). From then on the image is in
// use and cannot be removed. Preparing again for the same image is a no-op.
func (s *Store) PrepareRootfs(id, imageID string) error {
	return s.prepare(id, imageID, false)
}

// PrepareImageVolume makes a read-only view of image imageID, an image
// volume, under ID id. Like a rootfs, it keeps the image from being removed
// until RemoveRootfs(id); MountRootfs(id) mounts it read-only.
func (s *Store) PrepareImageVolume(id, imageID string) error {
	return s.prepare(id, imageID, true)
}

func (s *Store) prepare(id, imageID string, readOnly bool) error {
	if err := validRootfsID(id); err != nil {
		return err
	}
	c, unlock, err := s.lockedCatalog(unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()
	img, err := resolve(c.images, imageID)
	if err != nil {
		return fmt.Errorf("prepare rootfs %s: %w", id, err)
	}
	if img.IsArtifact() && !readOnly {
		return fmt.Errorf("prepare rootfs %s: image %s is an %w (%s), for image volumes only", id, img.ID, ErrArtifact, img.ArtifactType)
	}
	if rec, err := s.readRootfsRecord(id); err == nil {
		if rec.ImageID == img.ID && rec.ReadOnly == readOnly {
			return nil
		}
		return fmt.Errorf("rootfs %s is for image %s: %w", id, rec.ImageID, ErrExists)
	}
	return s.makeRootfs(id, img, readOnly)
}

// makeRootfs builds the directories, then the record; the caller holds the
// meta lock. Debris of an earlier, interrupted attempt is cleared first.
func (s *Store) makeRootfs(id string, img *Image, readOnly bool) (retErr error) {
	dir := s.rootfsDir(id)
	if err := removeHalfMadeRootfs(id, dir); err != nil {
		return fmt.Errorf("prepare rootfs %s: %w", id, err)
	}
	defer func() {
		if retErr != nil {
			os.RemoveAll(dir)
		}
	}()
	type dirMode struct {
		path string
		mode os.FileMode
	}
	// merged is a mountpoint: the mounted overlay's root has the upper
	// dir's mode, so merged itself can be as private as dir.
	dirs := []dirMode{{dir, 0o700}, {filepath.Join(dir, "upper"), 0o755}, {filepath.Join(dir, "work"), 0o700}, {filepath.Join(dir, "merged"), 0o700}}
	if readOnly {
		dirs = []dirMode{{dir, 0o700}, {filepath.Join(dir, "merged"), 0o700}}
	}
	for _, d := range dirs {
		if err := os.Mkdir(d.path, d.mode); err != nil {
			return fmt.Errorf("prepare rootfs %s: %w", id, err)
		}
		// The upper dir's mode becomes the mode of the container's "/".
		if err := os.Chmod(d.path, d.mode); err != nil {
			return fmt.Errorf("prepare rootfs %s: %w", id, err)
		}
	}
	rec := rootfsRecord{ID: id, ImageID: img.ID, ChainIDs: img.ChainIDs(), Created: time.Now().UTC(), ReadOnly: readOnly}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	// Atomic, not durable: a rootfs serves a container, which a reboot
	// ends. A crash of the machine that loses the record leaves a directory
	// without one, garbage-collected as half-made, and the container's
	// record (the caller's) shows the container exited either way.
	if err := atomicfile.Replace(filepath.Join(dir, rootfsRecordName), b, 0o600); err != nil {
		return fmt.Errorf("prepare rootfs %s: %w", id, err)
	}
	return nil
}

func (s *Store) readRootfsRecord(id string) (rootfsRecord, error) {
	b, err := os.ReadFile(filepath.Join(s.rootfsDir(id), rootfsRecordName))
	if errors.Is(err, os.ErrNotExist) {
		return rootfsRecord{}, fmt.Errorf("rootfs %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return rootfsRecord{}, err
	}
	var rec rootfsRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return rootfsRecord{}, fmt.Errorf("rootfs %s: %w", id, err)
	}
	return rec, nil
}

// readRootfsRecords returns every rootfs record, and the directories that
// have none (half-made).
func (s *Store) readRootfsRecords() (records []rootfsRecord, orphans []string, err error) {
	entries, err := os.ReadDir(s.path(snapshotsDir))
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		rec, err := s.readRootfsRecord(e.Name())
		switch {
		case err == nil:
			records = append(records, rec)
		case errors.Is(err, ErrNotFound):
			orphans = append(orphans, s.rootfsDir(e.Name()))
		default:
			return nil, nil, err
		}
	}
	return records, orphans, nil
}

// Rootfses returns the IDs of every rootfs, sorted, so that the daemon can
// remove those of containers it no longer knows at start-up: from the
// snapshots directory alone, no record read (a restart with 100 containers
// read and decoded 100), so a half-made one (its record never written) is
// among them; RemoveRootfs removes either.
func (s *Store) Rootfses() []string {
	entries, err := os.ReadDir(s.path(snapshotsDir))
	if err != nil {
		s.log.WithError(err).Warn("image store: cannot list rootfses")
	}
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.IsDir() && validRootfsID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids // ReadDir sorts by name
}

// MountRootfs mounts the overlay of rootfs id (the image's layers under its
// upper dir; the layers alone, read-only, for an image volume) and returns
// the mountpoint. Mounting a mounted rootfs returns the same mountpoint.
func (s *Store) MountRootfs(id string) (string, error) {
	return s.mountRootfs(id, nil)
}

// RootfsPath is where MountRootfs and MountRootfsIDMapped mount rootfs id.
func (s *Store) RootfsPath(id string) string {
	return filepath.Join(s.rootfsDir(id), "merged")
}

func (s *Store) mountRootfs(id string, idmap *IDMap) (string, error) {
	if err := validRootfsID(id); err != nil {
		return "", err
	}
	rec, err := s.readRootfsRecord(id)
	if err != nil {
		return "", err
	}
	dir := s.rootfsDir(id)
	merged := s.RootfsPath(id)
	s.mountMu.Lock()
	defer s.mountMu.Unlock()
	mounted, err := isMountpoint(merged)
	if err != nil {
		return "", fmt.Errorf("mount rootfs %s: %w", id, err)
	}
	if mounted {
		return merged, nil
	}
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	lowers := s.lowerDirs(rec)
	if rec.ReadOnly {
		if len(rec.ChainIDs) == 0 {
			return merged, bindReadOnly(s.path(emptyDirName), merged, id)
		}
		upper, work = "", ""
		// Overlay without an upper dir wants two lower dirs at least.
		if len(lowers) == 1 {
			lowers = append(lowers, s.path(emptyDirName))
		}
	}
	if idmap != nil && !rec.ReadOnly {
		err = mountOverlayIDMapped(lowers, upper, work, merged, *idmap)
	} else {
		err = s.mountOverlay(lowers, upper, work, merged)
	}
	if err != nil {
		return "", fmt.Errorf("mount rootfs %s: %w", id, err)
	}
	return merged, nil
}

// bindReadOnly binds source read-only at target: the image volume of an
// image without layers, which overlay cannot mount (one lower dir, twice).
func bindReadOnly(source, target, id string) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mount image volume %s: %w", id, err)
	}
	if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		_ = unix.Unmount(target, unix.MNT_DETACH)
		return fmt.Errorf("mount image volume %s read-only: %w", id, err)
	}
	return nil
}

// lowerDirs lists the layer dirs top first, as overlay wants them; an image
// without layers gets the empty dir (overlay needs a lower dir).
func (s *Store) lowerDirs(rec rootfsRecord) []string {
	if len(rec.ChainIDs) == 0 {
		return []string{s.path(emptyDirName)}
	}
	dirs := make([]string, 0, len(rec.ChainIDs))
	for i := len(rec.ChainIDs) - 1; i >= 0; i-- {
		dirs = append(dirs, s.layerDir(rec.ChainIDs[i]))
	}
	return dirs
}

// UnmountRootfs unmounts rootfs id; a busy mount is detached (lazily
// unmounted). Unmounting what is not mounted, or not there, succeeds.
func (s *Store) UnmountRootfs(id string) error {
	if err := validRootfsID(id); err != nil {
		return err
	}
	s.mountMu.Lock()
	defer s.mountMu.Unlock()
	return unmountAll(id, s.RootfsPath(id))
}

// unmountAll peels every mount off merged.
func unmountAll(id, merged string) error {
	for range unmountAttempts {
		mounted, err := isMountpoint(merged)
		if errors.Is(err, os.ErrNotExist) || err == nil && !mounted {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unmount rootfs %s: %w", id, err)
		}
		err = unix.Unmount(merged, 0)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(merged, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount rootfs %s: %w", id, err)
		}
	}
	return fmt.Errorf("unmount rootfs %s: still mounted after %d unmounts", id, unmountAttempts)
}

// removeHalfMadeRootfs deletes a rootfs dir that has no record. Its overlay
// may still be mounted on merged (a crash between the mount and a later
// step): a RemoveAll through the mount would delete the container's files
// one by one, so the mount goes first.
func removeHalfMadeRootfs(id, dir string) error {
	if err := unmountAll(id, filepath.Join(dir, "merged")); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// RemoveRootfs unmounts rootfs id and deletes it with its upper dir. The
// record goes first (the directory is moved to the temp dir under the
// lock), so the image stops being in use at once. Removing an unknown
// rootfs succeeds.
func (s *Store) RemoveRootfs(id string) error {
	if err := validRootfsID(id); err != nil {
		return err
	}
	if err := s.UnmountRootfs(id); err != nil {
		return err
	}
	release, err := s.holdContent()
	if err != nil {
		return err
	}
	defer release()
	trash, err := s.detachRootfs(id)
	if err != nil || trash == "" {
		return err
	}
	s.forgetRootfsUsage(id)
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("remove rootfs %s: %w", id, err)
	}
	return nil
}

// detachRootfs moves the rootfs dir into the temp dir, under the meta lock;
// it returns "" when there is none.
func (s *Store) detachRootfs(id string) (string, error) {
	lock, err := lockFile(s.path(metaLockName), unix.LOCK_EX)
	if err != nil {
		return "", fmt.Errorf("image store lock: %w", err)
	}
	defer lock.Close()
	dir := s.rootfsDir(id)
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	trash, err := os.MkdirTemp(s.path(tmpDir), "rootfs-")
	if err != nil {
		return "", fmt.Errorf("remove rootfs %s: %w", id, err)
	}
	target := filepath.Join(trash, "dir")
	if err := os.Rename(dir, target); err != nil {
		os.Remove(trash)
		return "", fmt.Errorf("remove rootfs %s: %w", id, err)
	}
	return trash, atomicfile.SyncDir(s.path(snapshotsDir))
}
