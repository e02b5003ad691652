package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"
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
	if err := validRootfsID(id); err != nil {
		return err
	}
	lock, err := lockFile(s.path(metaLockName), unix.LOCK_EX)
	if err != nil {
		return fmt.Errorf("image store lock: %w", err)
	}
	defer lock.Close()
	c, err := s.readCatalog()
	if err != nil {
		return err
	}
	img, err := resolve(c.images, imageID)
	if err != nil {
		return fmt.Errorf("prepare rootfs %s: %w", id, err)
	}
	if rec, err := s.readRootfsRecord(id); err == nil {
		if rec.ImageID == img.ID {
			return nil
		}
		return fmt.Errorf("rootfs %s is for image %s: %w", id, rec.ImageID, ErrExists)
	}
	return s.makeRootfs(id, img)
}

// makeRootfs builds the directories, then the record; the caller holds the
// meta lock. Debris of an earlier, interrupted attempt is cleared first.
func (s *Store) makeRootfs(id string, img *Image) (retErr error) {
	dir := s.rootfsDir(id)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("prepare rootfs %s: %w", id, err)
	}
	defer func() {
		if retErr != nil {
			os.RemoveAll(dir)
		}
	}()
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{dir, 0o700}, {filepath.Join(dir, "upper"), 0o755}, {filepath.Join(dir, "work"), 0o700}, {filepath.Join(dir, "merged"), 0o755}} {
		if err := os.Mkdir(d.path, d.mode); err != nil {
			return fmt.Errorf("prepare rootfs %s: %w", id, err)
		}
		// The upper dir's mode becomes the mode of the container's "/".
		if err := os.Chmod(d.path, d.mode); err != nil {
			return fmt.Errorf("prepare rootfs %s: %w", id, err)
		}
	}
	rec := rootfsRecord{ID: id, ImageID: img.ID, ChainIDs: img.ChainIDs(), Created: time.Now().UTC()}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, rootfsRecordName), b, 0o600); err != nil {
		return fmt.Errorf("prepare rootfs %s: %w", id, err)
	}
	return syncDir(s.path(snapshotsDir))
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

// Rootfses returns the IDs of every prepared rootfs, sorted, so that the
// daemon can remove those of containers it no longer knows at start-up.
func (s *Store) Rootfses() []string {
	records, _, err := s.readRootfsRecords()
	if err != nil {
		s.log.WithError(err).Warn("image store: cannot list rootfses")
	}
	ids := make([]string, 0, len(records))
	for _, r := range records {
		ids = append(ids, r.ID)
	}
	sort.Strings(ids)
	return ids
}

// MountRootfs mounts the overlay of rootfs id (the image's layers under its
// upper dir) and returns the mountpoint. Mounting a mounted rootfs returns
// the same mountpoint.
func (s *Store) MountRootfs(id string) (string, error) {
	return s.mountRootfs(id, nil)
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
	merged := filepath.Join(dir, "merged")
	s.mountMu.Lock()
	defer s.mountMu.Unlock()
	mounted, err := isMountpoint(merged)
	if err != nil {
		return "", fmt.Errorf("mount rootfs %s: %w", id, err)
	}
	if mounted {
		return merged, nil
	}
	if idmap != nil {
		err = mountOverlayIDMapped(s.lowerDirs(rec), filepath.Join(dir, "upper"), filepath.Join(dir, "work"), merged, *idmap)
	} else {
		err = s.mountOverlay(s.lowerDirs(rec), filepath.Join(dir, "upper"), filepath.Join(dir, "work"), merged)
	}
	if err != nil {
		return "", fmt.Errorf("mount rootfs %s: %w", id, err)
	}
	return merged, nil
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
	merged := filepath.Join(s.rootfsDir(id), "merged")
	s.mountMu.Lock()
	defer s.mountMu.Unlock()
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
	return trash, syncDir(s.path(snapshotsDir))
}
