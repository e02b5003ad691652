package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/atomicfile"
)

// ErrDigestMismatch: content does not hash to the digest that names it.
var ErrDigestMismatch = errors.New("digest mismatch")

// blobOpener opens the content of one blob (from a registry or an archive).
type blobOpener func(ctx context.Context, desc v1.Descriptor) (io.ReadCloser, error)

// checkDigest accepts only sha256 digests: they name files in the store,
// so anything else (or a malformed one) must never reach a path.
func checkDigest(h v1.Hash) error {
	if h.Algorithm != "sha256" || len(h.Hex) != 64 || !isHex(h.Hex) {
		return fmt.Errorf("unsupported digest %q", h.String())
	}
	return nil
}

func (s *Store) blobPath(h v1.Hash) string { return s.path(blobsDir, h.Hex) }

func (s *Store) hasBlob(h v1.Hash) bool {
	_, err := os.Stat(s.blobPath(h))
	return err == nil
}

// ensureBlob makes sure the blob desc names is in the store, downloading it
// with open if not. Concurrent calls for one digest download it once.
// progress (may be nil) watches the download of what (layerDownload …).
func (s *Store) ensureBlob(ctx context.Context, what string, desc v1.Descriptor, open blobOpener, progress *pullProgress) error {
	if err := checkDigest(desc.Digest); err != nil {
		return err
	}
	if s.hasBlob(desc.Digest) {
		return nil
	}
	return s.once(ctx, &s.blobFlight, desc.Digest.Hex, func() error {
		if s.hasBlob(desc.Digest) {
			return nil
		}
		return s.fetchBlob(ctx, what, desc, open, progress)
	})
}

// fetchBlob downloads a blob to a temp file, checks its size and digest, and
// only then renames it into place: a bad or cut-off download leaves nothing.
func (s *Store) fetchBlob(ctx context.Context, what string, desc v1.Descriptor, open blobOpener, progress *pullProgress) (retErr error) {
	layer := progress.begin(what, desc.Digest.String(), desc.Size)
	defer func() { progress.end(layer, retErr) }()
	rc, err := open(ctx, desc)
	if err != nil {
		return err
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(s.path(tmpDir), "blob-")
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	w := io.MultiWriter(tmp, h)
	if layer != nil {
		w = io.MultiWriter(tmp, h, layer)
	}
	// One byte more than announced, to notice a blob that is too long.
	n, err := io.Copy(w, io.LimitReader(contextReader{ctx, rc}, desc.Size+1))
	got := hex.EncodeToString(h.Sum(nil))
	// A whole blob that hashes wrong is a digest mismatch, whatever its
	// source said at its end.
	if n == desc.Size && got != desc.Digest.Hex {
		return fmt.Errorf("blob %s: content hashes to sha256:%s: %w", desc.Digest, got, ErrDigestMismatch)
	}
	if err != nil {
		return err
	}
	if n != desc.Size {
		return fmt.Errorf("blob %s: got %d bytes, the descriptor says %d", desc.Digest, n, desc.Size)
	}
	return s.commitTemp(tmp, s.blobPath(desc.Digest))
}

// putBlob stores content the caller already has in memory (a manifest).
func (s *Store) putBlob(content []byte) (v1.Hash, error) {
	sum := sha256.Sum256(content)
	h := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	if s.hasBlob(h) {
		return h, nil
	}
	tmp, err := os.CreateTemp(s.path(tmpDir), "blob-")
	if err != nil {
		return h, err
	}
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return h, err
	}
	if err := s.commitTemp(tmp, s.blobPath(h)); err != nil {
		os.Remove(tmp.Name())
		return h, err
	}
	return h, nil
}

// commitTemp makes a finished temp file durable and renames it to dst.
func (s *Store) commitTemp(tmp *os.File, dst string) error {
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return err
	}
	return atomicfile.SyncDir(s.path(blobsDir))
}

// flights are the downloads or unpacks running, by key, so that two pulls
// that need the same blob or layer do the work once.
type flights struct {
	mu      sync.Mutex
	running map[string]*flight
}

type flight struct {
	done chan struct{}
	err  error // set before done is closed
}

// once runs fn for key unless a call for key is already running, in which
// case it waits for that one. The caller that runs fn runs it itself, so
// that nothing of its work (a temp file being removed) outlives its call
// when its context ends; a waiter leaves when its own context ends, and
// retries, its context still live, when the runner failed only because the
// runner's context ended.
func (s *Store) once(ctx context.Context, f *flights, key string, fn func() error) error {
	for {
		f.mu.Lock()
		if fl, ok := f.running[key]; ok {
			f.mu.Unlock()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-fl.done:
			}
			if isContextError(fl.err) && ctx.Err() == nil {
				continue
			}
			return fl.err
		}
		if f.running == nil {
			f.running = map[string]*flight{}
		}
		fl := &flight{done: make(chan struct{})}
		f.running[key] = fl
		f.mu.Unlock()

		fl.err = fn()
		f.mu.Lock()
		delete(f.running, key)
		f.mu.Unlock()
		close(fl.done)
		return fl.err
	}
}

func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// contextReader stops a copy when its context ends, even if the source
// would block (a stalled registry connection is also closed by the HTTP
// client when the request's context ends).
type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// holdContent keeps garbage collection from running while a pull, import,
// export or rootfs removal uses blobs, layers or the temp dir, in any
// process. The release runs a GC that was asked for in the meantime.
func (s *Store) holdContent() (release func(), err error) {
	lock, err := lockFile(s.path(contentLockName), unix.LOCK_SH)
	if err != nil {
		return nil, fmt.Errorf("image store content lock: %w", err)
	}
	return func() {
		lock.Close()
		if s.gcPending() {
			if err := s.tryGC(); err != nil {
				s.log.WithError(err).Warn("image store: garbage collection failed")
			}
		}
	}, nil
}
