package image

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Remove deletes the image ref names (any reference Get accepts) with all
// its tags, then garbage-collects the blobs and layers no image needs any
// more. An unknown image is not an error (the kubelet retries removals);
// an image a rootfs uses is ErrInUse, and nothing is removed.
func (s *Store) Remove(ref string) error {
	removed, err := s.removeRecord(ref)
	if err != nil || !removed {
		return err
	}
	if err := s.requestGC(); err != nil {
		// The image is gone; its content goes at the next collection.
		s.log.WithError(err).Warn("image store: garbage collection after removal failed")
	}
	return nil
}

func (s *Store) removeRecord(ref string) (bool, error) {
	c, unlock, err := s.lockedCatalog(unix.LOCK_EX)
	if err != nil {
		return false, err
	}
	defer unlock()
	img, err := resolve(c.images, ref)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	records, _, err := s.readRootfsRecords()
	if err != nil {
		return false, err
	}
	for _, r := range records {
		if r.ImageID == img.ID {
			return false, fmt.Errorf("image %s is used by the rootfs of container %s: %w", img.ID, r.ID, ErrInUse)
		}
	}
	id := img.ID
	_, err = s.updateLocked(func(images []Image) ([]Image, error) {
		out := images[:0]
		for _, im := range images {
			if im.ID != id {
				out = append(out, im)
			}
		}
		return out, nil
	})
	return err == nil, err
}
