package image

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Garbage collection removes blobs and layers that no image or rootfs refers
// to, and everything in the temp dir. It needs the content lock exclusively,
// so it never runs while a pull, import or export (of any process) is
// writing or reading content. A removal that finds the store busy leaves the
// gc-pending marker, and whoever releases the content lock last runs it.

// requestGC marks a GC as wanted and runs it now if the store is idle.
// The marker is written before trying so that a busy holder, on release,
// is sure to see it.
func (s *Store) requestGC() error {
	if err := os.WriteFile(s.path(gcPendingName), nil, 0o600); err != nil {
		return err
	}
	return s.tryGC()
}

func (s *Store) gcPending() bool {
	_, err := os.Stat(s.path(gcPendingName))
	return err == nil
}

// tryGC runs the pending GC unless the content lock is held elsewhere. It
// checks the marker again after releasing the lock, for a request that came
// while it held it.
func (s *Store) tryGC() error {
	for range 3 {
		ran, err := s.gcIfIdle()
		if err != nil || !ran || !s.gcPending() {
			return err
		}
	}
	return nil
}

func (s *Store) gcIfIdle() (bool, error) {
	lock, err := lockFile(s.path(contentLockName), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("content lock: %w", err)
	}
	defer lock.Close()
	for s.gcPending() {
		if err := os.Remove(s.path(gcPendingName)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return true, err
		}
		if err := s.sweep(); err != nil {
			return true, err
		}
	}
	return true, nil
}

// liveSet is what the image records and rootfs records refer to.
type liveSet struct {
	blobs  map[string]bool // hex digests
	layers map[string]bool // hex chain IDs
}

// sweep deletes what is not live. The caller holds the content lock
// exclusively, so nobody is adding content; removals may still happen, and
// only make more garbage for the next sweep.
func (s *Store) sweep() error {
	live, err := s.liveContent()
	if err != nil {
		return err
	}
	removed := 0
	removed += s.removeEntries(s.path(tmpDir), func(string) bool { return true })
	removed += s.removeEntries(s.path(blobsDir), func(name string) bool { return !live.blobs[name] })
	removed += s.removeEntries(s.path(layersDir), func(name string) bool { return !live.layers[name] })
	removed += s.removeEntries(s.path(linksDir), func(name string) bool {
		target, err := os.Readlink(s.path(linksDir, name))
		return err != nil || !live.layers[filepath.Base(target)]
	})
	if removed > 0 {
		s.log.WithField("entries", removed).Info("image store: garbage collected unreferenced content")
	}
	s.invalidateUsage()
	return nil
}

// liveContent reads the records under the meta lock and, while it holds it,
// clears the debris of interrupted record writes and rootfs preparations
// (which happen under that lock).
func (s *Store) liveContent() (liveSet, error) {
	c, unlock, err := s.lockedCatalog(unix.LOCK_EX)
	if err != nil {
		return liveSet{}, err
	}
	defer unlock()
	live := liveSet{blobs: map[string]bool{}, layers: map[string]bool{}}
	for _, img := range c.images {
		if !img.IsArtifact() { // an artifact's ID names no blob
			live.blobs[strings.TrimPrefix(img.ID, "sha256:")] = true
		}
		live.blobs[strings.TrimPrefix(img.ManifestDigest, "sha256:")] = true
		for _, l := range img.Layers {
			live.blobs[strings.TrimPrefix(l.Digest, "sha256:")] = true
			live.layers[strings.TrimPrefix(l.ChainID, "sha256:")] = true
		}
		for _, set := range img.Signatures {
			for _, sig := range set.Signatures {
				live.blobs[strings.TrimPrefix(sig.Payload, "sha256:")] = true
			}
		}
	}
	records, orphans, err := s.readRootfsRecords()
	if err != nil {
		return liveSet{}, err
	}
	for _, rec := range records {
		for _, chain := range rec.ChainIDs {
			live.layers[strings.TrimPrefix(chain, "sha256:")] = true
		}
	}
	for _, dir := range orphans {
		if err := removeHalfMadeRootfs(filepath.Base(dir), dir); err != nil {
			s.log.WithError(err).Warn("image store: cannot remove a half-made rootfs")
		}
	}
	s.removeEntries(s.root, func(name string) bool { return strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-") })
	return live, nil
}

// removeEntries deletes the entries of dir that doomed selects and counts them.
func (s *Store) removeEntries(dir string, doomed func(name string) bool) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		s.log.WithError(err).Warn("image store: garbage collection cannot read a directory")
		return 0
	}
	n := 0
	for _, e := range entries {
		if !doomed(e.Name()) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			s.log.WithError(err).WithField("path", filepath.Join(dir, e.Name())).Warn("image store: cannot remove garbage")
			continue
		}
		n++
	}
	return n
}
