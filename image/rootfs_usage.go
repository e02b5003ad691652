package image

import (
	"fmt"
	"os"
	"path/filepath"
)

// RootfsUsage reports what a container has written: the bytes and inodes of
// its rootfs's upper dir (the kubelet's "writable layer"). Unknown → ErrNotFound.
func (s *Store) RootfsUsage(id string) (FsUsage, error) {
	if err := validRootfsID(id); err != nil {
		return FsUsage{}, err
	}
	upper := filepath.Join(s.rootfsDir(id), "upper")
	if _, err := os.Stat(upper); err != nil {
		return FsUsage{}, fmt.Errorf("rootfs %s: %w", id, ErrNotFound)
	}
	bytes, inodes, err := diskUsage(upper)
	if err != nil {
		return FsUsage{}, fmt.Errorf("usage of rootfs %s: %w", id, err)
	}
	return FsUsage{Mountpoint: upper, UsedBytes: bytes, InodesUsed: inodes}, nil
}
