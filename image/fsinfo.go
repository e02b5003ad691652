package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/atomicfile"
	"github.com/minicri/minicri/internal/fstree"
	"github.com/minicri/minicri/internal/mountinfo"
)

// usageTTL is how long FsInfo's answer is taken as current when no image
// was added or removed meanwhile: the kubelet asks every few seconds, and a
// walk of the store, which holds the containers' writable layers too, costs
// what the pods wrote.
const usageTTL = 10 * time.Second

// usageName, in the store's root, keeps the last measure for the next
// start: the kubelet's image client asks ImageFsInfo first thing, and a
// walk on a restarted daemon's first call would cost what the pods wrote,
// more than the recovery itself.
const usageName = "fs-usage.json"

// usageCache is a measure of the store and the catalog generation it was
// taken at.
type usageCache struct {
	Gen   uint64
	At    time.Time
	Usage FsUsage
}

// FsInfo reports the filesystem of the store and what the store uses on it:
// bytes (allocated blocks) and inodes of blobs, layers and container upper
// dirs, each inode counted once however many hard links it has.
//
// Only a pull or a removal (a new catalog generation) makes a caller wait
// for a walk of the store. A measure older than usageTTL is answered as it
// is while one walk in the background takes a new one, as containerd
// answers from its periodic sync: what the pods write never holds a call.
func (s *Store) FsInfo() (FsUsage, error) {
	c, err := s.current()
	if err != nil {
		return FsUsage{}, err
	}
	if u := s.lastUsage(); u != nil && u.Gen == c.gen {
		if s.opts.Hooks.now().Sub(u.At) >= usageTTL {
			s.refreshUsage()
		}
		return u.Usage, nil
	}
	s.measureMu.Lock()
	defer s.measureMu.Unlock()
	if u := s.lastUsage(); u != nil && u.Gen == c.gen {
		return u.Usage, nil // measured by the call before this one
	}
	u, err := s.measureUsage(c.gen)
	if err != nil {
		return FsUsage{}, err
	}
	return u.Usage, nil
}

// lastUsage is the last measure: the one in memory, or at a daemon's first
// call the one the last daemon kept.
func (s *Store) lastUsage() *usageCache {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.usage == nil && !s.usageLoaded {
		s.usageLoaded = true
		var u usageCache
		if data, err := os.ReadFile(s.path(usageName)); err == nil && json.Unmarshal(data, &u) == nil {
			s.usage = &u
		}
	}
	return s.usage
}

// refreshUsage measures the store again in the background, once at a time.
func (s *Store) refreshUsage() {
	if !s.measureMu.TryLock() {
		return // a measure is under way
	}
	go func() {
		defer s.measureMu.Unlock()
		c, err := s.current()
		if err == nil {
			_, err = s.measureUsage(c.gen)
		}
		if err != nil {
			s.log.WithError(err).Warn("image store: measure of its disk usage failed; ImageFsInfo answers the last one")
		}
	}()
}

// measureUsage walks the store, keeps the measure and returns it. The
// caller holds measureMu.
func (s *Store) measureUsage(gen uint64) (*usageCache, error) {
	mountpoint, err := mountpointOf(s.root)
	if err != nil {
		return nil, err
	}
	bytes, inodes, err := diskUsage(s.root)
	if err != nil {
		return nil, fmt.Errorf("image store usage: %w", err)
	}
	u := &usageCache{Gen: gen, At: s.opts.Hooks.now(), Usage: FsUsage{Mountpoint: mountpoint, UsedBytes: bytes, InodesUsed: inodes}}
	s.mu.Lock()
	if s.usage == nil || s.usage.Gen <= gen {
		s.usage = u
	}
	s.mu.Unlock()
	// Best effort: without it, the next daemon's first call walks.
	if data, err := json.Marshal(u); err == nil {
		_ = atomicfile.Replace(s.path(usageName), data, 0o600)
	}
	return u, nil
}

func (s *Store) invalidateUsage() {
	s.mu.Lock()
	s.usage = nil
	s.mu.Unlock()
}

// diskUsage walks root without crossing into other filesystems (mounted
// container rootfses would count their layers twice) and without following
// a link (internal/fstree): the walk takes the containers' upper dirs, whose
// links a container makes, and a directory swapped for a link to a host
// directory while the walk runs must not count the host's files.
//
// A file of n links is met n times; each meeting counts 1/n of it. The
// sums are kept per link count, so the division is exact when all the
// links are inside root, and the walk keeps no set of inodes: what it
// holds does not grow with the files a pod makes.
func diskUsage(root string) (bytes, inodes uint64, err error) {
	r, err := fstree.OpenRoot(root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil // removed meanwhile
	}
	if err != nil {
		return 0, 0, err
	}
	defer r.Close()
	var rootSt unix.Stat_t
	if err := unix.Fstat(int(r.Fd()), &rootSt); err != nil {
		return 0, 0, err
	}
	inodes, bytes = 1, uint64(rootSt.Blocks)*512
	type shared struct{ meetings, blocks uint64 }
	byLinks := map[uint64]*shared{} // link count → what files of that many links added
	err = r.Walk("", func(e *fstree.Entry) error {
		st := &e.Stat
		if st.Dev != rootSt.Dev {
			return fstree.SkipDir
		}
		if st.Nlink > 1 && !e.IsDir() {
			sh := byLinks[uint64(st.Nlink)]
			if sh == nil {
				sh = &shared{}
				byLinks[uint64(st.Nlink)] = sh
			}
			sh.meetings++
			sh.blocks += uint64(st.Blocks)
			return nil
		}
		inodes++
		bytes += uint64(st.Blocks) * 512
		return nil
	})
	for links, sh := range byLinks {
		// Rounded up: a file whose other links are outside root still counts.
		inodes += (sh.meetings + links - 1) / links
		bytes += (sh.blocks*512 + links - 1) / links
	}
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
	return m.Mountpoint, nil
}
