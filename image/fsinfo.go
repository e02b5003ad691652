package image

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
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

// mountpointOf finds the mount that holds path in /proc/self/mountinfo.
func mountpointOf(path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	best := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if (real == mp || strings.HasPrefix(real, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best = mp
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if best == "" {
		return "", fmt.Errorf("no mount holds %s", real)
	}
	return best, nil
}

// unescapeMountinfo decodes the octal escapes (\040 for a space) of mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
