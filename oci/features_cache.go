package oci

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/atomicfile"
)

// A runtime's `features` answer is kept on disk (Runtime.FeaturesCache) so
// that a daemon's restart runs no runtime at all: each probe is a process
// start, CPU taken from the recovery of a node's pods. The answer is reused only for the very
// binary that gave it: same path, device, inode, size, mtime and ctime (an
// upgrade renames a new file over the old one; an edit in place moves the
// ctime, which no user can set back), and the same kernel release.

// featuresKey names the binary and kernel a cached answer came from.
type featuresKey struct {
	Path          string
	Dev, Ino      uint64
	Size          int64
	Mtime, Ctime  int64 // unix nanoseconds
	KernelRelease string
}

// cachedFeatures is one file of the cache.
type cachedFeatures struct {
	Key      featuresKey
	Features Features
}

// binaryKey is path's identity now.
func binaryKey(path string) (featuresKey, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return featuresKey{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return featuresKey{
		Path:          path,
		Dev:           st.Dev,
		Ino:           st.Ino,
		Size:          st.Size,
		Mtime:         st.Mtim.Nano(),
		Ctime:         st.Ctim.Nano(),
		KernelRelease: kernelRelease(),
	}, nil
}

// featuresCacheFile is where the answer of the binary at path is kept.
func featuresCacheFile(dir, path string) string {
	sum := sha256.Sum256([]byte(path))
	return filepath.Join(dir, hex.EncodeToString(sum[:16])+".json")
}

// cachedFeaturesOf returns the kept answer for key, if there is one for
// that very binary.
func cachedFeaturesOf(dir string, key featuresKey) (Features, bool) {
	data, err := os.ReadFile(featuresCacheFile(dir, key.Path))
	if err != nil {
		return Features{}, false
	}
	var c cachedFeatures
	if json.Unmarshal(data, &c) != nil || c.Key != key {
		return Features{}, false
	}
	return c.Features, true
}

// keepFeatures writes f as the answer of the binary key names. A failure
// costs only the next start's probe.
func keepFeatures(dir string, key featuresKey, f Features) error {
	data, err := json.Marshal(cachedFeatures{Key: key, Features: f})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return atomicfile.Replace(featuresCacheFile(dir, key.Path), data, 0o600)
}
