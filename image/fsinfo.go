package image

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/minicri/minicri/internal/mountinfo"
)

// usageTTL is how long FsInfo answers from its last walk when no image was
// added or removed meanwhile: the kubelet asks every few seconds, and
// walking a big store is not free.
var usageTTL = 10 * time.Second

type usageCache struct {
	gen   uint64
	at    time.Time
	usage FsUsage
}

// FsInfo reports the filesystem of the store and what the store uses on it:
// bytes (allocated blocks) and inodes of blobs, layers and container upper
// dirs, each inode counted once however many hard links it has.
func (s *Store) FsInfo() (FsUsage, error) {
	c, err := s.current()
	if err != nil {
		return FsUsage{}, err
	}
	s.mu.Lock()
	cached := s.usage
	s.mu.Unlock()
	if cached != nil && cached.gen == c.gen && time.Since(cached.at) < usageTTL {
		return cached.usage, nil
	}
	mountpoint, err := mountpointOf(s.root)
	if err != nil {
		return FsUsage{}, err
	}
	bytes, inodes, err := diskUsage(s.root)
	if err != nil {
		return FsUsage{}, fmt.Errorf("image store usage: %w", err)
	}
	usage := FsUsage{Mountpoint: mountpoint, UsedBytes: bytes, InodesUsed: inodes}
	s.mu.Lock()
	s.usage = &usageCache{gen: c.gen, at: time.Now(), usage: usage}
	s.mu.Unlock()
	return usage, nil
}

func (s *Store) invalidateUsage() {
	s.mu.Lock()
	s.usage = nil
	s.mu.Unlock()
}

// diskUsage walks root without crossing into other filesystems (mounted
// container rootfses would count their layers twice).
func diskUsage(root string) (bytes, inodes uint64, err error) {
	var rootDev uint64
	seen := map[uint64]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil // removed while we walked
			}
			return err
		}
		fi, err := d.Info()
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if path == root {
			rootDev = st.Dev
		} else if st.Dev != rootDev {
			return filepath.SkipDir
		}
		if seen[st.Ino] {
			return nil
		}
		seen[st.Ino] = true
		inodes++
		bytes += uint64(st.Blocks) * 512
		return nil
	})
	return bytes, inodes, err
}

// mountpointOf finds the mount that holds path.
func mountpointOf(path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	m, err := mountinfo.Lookup(mountinfo.Path, real)
	if err != nil {
		return "", err
	}
	return m.Point, nil
}
