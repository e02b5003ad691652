package image

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/minicri/minicri/internal/defaults"
)

// A layer can declare far more than it carries: a sparse tar entry (GNU and
// PAX sparse formats, which archive/tar expands) names a 1 TiB file in a few
// hundred bytes, a compressed run of one byte unpacks a thousand times
// larger, and a million empty entries or a path ten thousand directories
// deep cost a few megabytes of layer. Limits bound what one pull or import
// unpacks, summed over the layers it unpacks (a layer already in the store
// was checked when it was unpacked): an image over a bound is refused, and
// nothing of it stays. containerd and moby have no such bounds; the
// defaults are far above what real images reach.

// ErrTooLarge: the image unpacks to more than Limits allows, or a manifest
// is larger than the cap (maxManifestSize).
var ErrTooLarge = errors.New("image exceeds a size limit")

// Defaults of Limits.
const (
	// DefaultMaxUnpackedBytes: the largest common images (CUDA and ML
	// stacks) unpack to 20-30 GB.
	DefaultMaxUnpackedBytes = 64 << 30
	// DefaultMaxUnpackedEntries: such images have 100,000-300,000 files.
	DefaultMaxUnpackedEntries = 1_000_000
	// DefaultMaxPathDepth: deeply nested node_modules trees reach 50-100.
	DefaultMaxPathDepth = 256
)

// Limits bound what one pull or import unpacks. A zero field is its default.
type Limits struct {
	// MaxUnpackedBytes bounds the sizes that the regular files of the
	// image's layers declare, holes of sparse files included: the apparent
	// size, checked at each entry's header before a byte of it is read.
	// Runs of zeros are not written (they stay holes), so the disk an image
	// takes is at most this, usually much less.
	MaxUnpackedBytes int64
	// MaxUnpackedEntries bounds the files, directories (the parents a layer
	// leaves implicit too), links, devices and whiteouts unpacked.
	MaxUnpackedEntries int64
	// MaxPathDepth bounds the directories in one entry's path.
	MaxPathDepth int
}

func (l Limits) withDefaults() Limits {
	defaults.Positive(&l.MaxUnpackedBytes, DefaultMaxUnpackedBytes)
	defaults.Positive(&l.MaxUnpackedEntries, DefaultMaxUnpackedEntries)
	defaults.Positive(&l.MaxPathDepth, DefaultMaxPathDepth)
	return l
}

// LimitError says which bound an image went over, and the configuration
// key that sets it, so that an operator knows what to raise.
type LimitError struct {
	What  string // "bytes of files", "entries", "directories in a path"
	Key   string // "image.max_unpacked_bytes" …
	Limit int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("image unpacks more than %d %s (the limit set by %s)", e.Limit, e.What, e.Key)
}

func (e *LimitError) Unwrap() error { return ErrTooLarge }

// unpackBudget counts what one pull unpacks, across its layers (which
// unpack concurrently).
type unpackBudget struct {
	limits         Limits
	bytes, entries atomic.Int64
}

func newBudget(l Limits) *unpackBudget { return &unpackBudget{limits: l.withDefaults()} }

// addBytes charges a regular file's declared size.
// The count never goes over the limit, so nothing can overflow it.
func (b *unpackBudget) addBytes(n int64) error {
	max := b.limits.MaxUnpackedBytes
	for {
		cur := b.bytes.Load()
		if n < 0 || n > max-cur {
			return &LimitError{"bytes of files", "image.max_unpacked_bytes", max}
		}
		if b.bytes.CompareAndSwap(cur, cur+n) {
			return nil
		}
	}
}

// addEntry charges one inode (or one tar entry).
func (b *unpackBudget) addEntry() error {
	if b.entries.Add(1) > b.limits.MaxUnpackedEntries {
		return &LimitError{"entries (files, directories, links)", "image.max_unpacked_entries", b.limits.MaxUnpackedEntries}
	}
	return nil
}

// checkDepth refuses a path of more than MaxPathDepth components.
func (b *unpackBudget) checkDepth(depth int) error {
	if depth > b.limits.MaxPathDepth {
		return &LimitError{"directories in a path", "image.max_path_depth", int64(b.limits.MaxPathDepth)}
	}
	return nil
}

// collectRefused removes what a pull or import refused by a limit brought
// in (blobs, layers it unpacked before the limit was hit): a retry would be
// refused again, so there is nothing to resume. The caller no longer holds
// the content lock; if another pull does, the last one out collects.
func (s *Store) collectRefused(err error) {
	if !errors.Is(err, ErrTooLarge) {
		return
	}
	if err := s.requestGC(); err != nil {
		s.log.WithError(err).Warn("image store: cannot collect the content of a refused image")
	}
}
