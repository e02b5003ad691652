package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/minicri/minicri/internal/tracing"
)

// A layer that is neither in the store as a blob nor unpacked is streamed:
// one pass over the download writes the blob's temp file, hashes the blob,
// decompresses, hashes the tar (the diff ID) and unpacks it into the
// layer's temp dir. Nothing is kept unless the blob's size and digest and
// the tar's diff ID are right at the end: then the layer dir is renamed
// into place, and the blob after it. Each layer dir holds one layer's diff
// (overlay stacks them at mount time), so no layer waits for the one below
// it; the image record, written when every layer is in, is what makes the
// chain usable. A layer whose unpack cannot start at once (every unpack
// slot busy) is downloaded to its blob file meanwhile and unpacked from it
// when a slot frees, so that the network is never idle while the CPU is
// busy.

// maxResumes bounds how often one layer download continues after its
// connection broke.
const maxResumes = 3

// fetchLayer brings one layer of an image in: its blob and its unpacked
// dir. downloads bounds the pull's downloads at once; its slot is held
// while a byte of this layer is coming.
func (s *Store) fetchLayer(ctx context.Context, l v1.Descriptor, diffID, chain v1.Hash, req ingestRequest, budget *unpackBudget, downloads chan struct{}) error {
	if err := checkDigest(chain); err != nil {
		return err
	}
	select {
	case downloads <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	held := true
	release := func() {
		if held {
			<-downloads
			held = false
		}
	}
	defer release()
	if !s.hasLayer(chain) && !s.hasBlob(l.Digest) {
		err := s.once(ctx, &s.layerFlight, chain.Hex, func() error {
			if s.hasLayer(chain) || s.hasBlob(l.Digest) {
				return nil // what is missing is done below
			}
			// Never wait for a slot here: the download goes on below
			// while the CPUs are busy.
			release, ok := s.unpackSlots.try()
			if !ok {
				return nil
			}
			defer release()
			return s.once(ctx, &s.blobFlight, l.Digest.Hex, func() error {
				if s.hasBlob(l.Digest) {
					return nil
				}
				return s.streamLayer(ctx, l, diffID, chain, req, budget, release)
			})
		})
		if err != nil {
			return fmt.Errorf("layer %s: %w", l.Digest, err)
		}
	}
	if err := s.ensureBlob(ctx, layerDownload, l, req.open, req.progress); err != nil {
		return fmt.Errorf("layer %s: %w", l.Digest, err)
	}
	release()
	return s.ensureLayer(ctx, chain, diffID, l.Digest, budget)
}

// streamLayer downloads, verifies and unpacks one layer in one pass (see
// above). The caller holds the layer's and the blob's flights and an unpack
// slot, which written gives back once the layer is written and checked.
func (s *Store) streamLayer(ctx context.Context, desc v1.Descriptor, diffID, chain v1.Hash, req ingestRequest, budget *unpackBudget, written func()) (err error) {
	ctx, span := tracing.Start(ctx, "image.unpack", tracing.LayerDigest.String(desc.Digest.String()))
	defer func() { tracing.End(span, err) }()
	watch := req.progress.begin(layerDownload, desc.Digest.String(), desc.Size)
	watch.streamed()
	defer func() { req.progress.end(watch, err) }()

	tmp, err := os.CreateTemp(s.path(tmpDir), "blob-")
	if err != nil {
		return err
	}
	sink := &blobSink{file: tmp, hash: sha256.New(), watch: watch}
	body := &resumingReader{ctx: ctx, desc: desc, open: req.open, openAt: req.openAt, watch: watch, log: s.log}
	defer func() {
		// The decoders' goroutines may still read; they find the body and
		// the sink closed.
		body.Close()
		if sink.close() != nil || err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// One byte more than announced, to notice a blob that is too long.
	blob := io.TeeReader(io.LimitReader(body, desc.Size+1), sink)
	err = s.makeLayerDir(chain, written, func(dir string) error {
		got, err := unpackStream(ctx, blob, dir, budget, func() { body.Close() })
		var se *streamError
		if errors.As(err, &se) {
			// A blob that does not decompress may be one that is not
			// what its digest names: that is what to report.
			if werr := checkWholeBlob(desc, blob, sink); werr != nil && errors.Is(werr, ErrDigestMismatch) {
				return werr
			}
		}
		if err != nil {
			return fmt.Errorf("unpack layer %s: %w", desc.Digest, err)
		}
		// The digest covers the whole blob, whatever follows the
		// compressed stream included.
		if err := checkWholeBlob(desc, blob, sink); err != nil {
			return err
		}
		if got != diffID {
			return fmt.Errorf("layer %s uncompresses to %s, the image config says %s: %w", desc.Digest, got, diffID, ErrDigestMismatch)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sink.close()
	return s.commitTemp(tmp, s.blobPath(desc.Digest))
}

// checkWholeBlob reads the rest of blob and checks its size and digest.
func checkWholeBlob(desc v1.Descriptor, blob io.Reader, sink *blobSink) error {
	_, err := io.Copy(io.Discard, blob)
	n, sum := sink.sum()
	if n == desc.Size && sum != desc.Digest.Hex {
		return fmt.Errorf("blob %s: content hashes to sha256:%s: %w", desc.Digest, sum, ErrDigestMismatch)
	}
	if err != nil {
		return fmt.Errorf("blob %s: %w", desc.Digest, err)
	}
	if n != desc.Size {
		return fmt.Errorf("blob %s: got %d bytes, the descriptor says %d", desc.Digest, n, desc.Size)
	}
	return nil
}

// blobSink takes the bytes of a streamed blob: its temp file, its hash, the
// progress count. The decompressors read ahead in goroutines of their own,
// so it is written from those; once closed it takes nothing more.
type blobSink struct {
	mu     sync.Mutex
	file   *os.File
	hash   hash.Hash
	watch  *layerProgress
	n      int64
	closed bool
	err    error
}

func (b *blobSink) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, os.ErrClosed
	}
	if b.err != nil {
		return 0, b.err
	}
	if _, err := b.file.Write(p); err != nil {
		b.err = err
		return 0, err
	}
	b.hash.Write(p)
	b.n += int64(len(p))
	if b.watch != nil {
		b.watch.Write(p)
	}
	return len(p), nil
}

// sum is the size and the hex sha256 of what was written.
func (b *blobSink) sum() (int64, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n, hex.EncodeToString(b.hash.Sum(nil))
}

// close stops taking bytes, and says whether a write failed.
func (b *blobSink) close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.err
}

// rangeOpener opens a blob's content from offset on (an HTTP range
// request), or fails when the source cannot.
type rangeOpener func(ctx context.Context, desc v1.Descriptor, offset int64) (io.ReadCloser, error)

// resumingReader reads a blob, and when the connection breaks mid-blob,
// asks again for the bytes from where it stopped (at most maxResumes
// times), so that a broken connection costs what was missing, not the
// layer. Whoever reads it checks the digest over the whole.
type resumingReader struct {
	ctx    context.Context
	desc   v1.Descriptor
	open   blobOpener
	openAt rangeOpener // nil: no resuming
	watch  *layerProgress
	log    interface{ Infof(string, ...any) }

	mu      sync.Mutex
	rc      io.ReadCloser
	off     int64
	resumes int
	closed  bool
}

func (r *resumingReader) Read(p []byte) (int, error) {
	for {
		rc, err := r.current()
		if err != nil {
			return 0, err
		}
		r.watch.startRead()
		n, err := rc.Read(p)
		r.watch.endRead()
		r.mu.Lock()
		r.off += int64(n)
		if err == nil || errors.Is(err, io.EOF) || r.closed || !r.canResume() {
			r.mu.Unlock()
			return n, err
		}
		rc.Close()
		r.rc = nil
		r.resumes++
		r.log.Infof("layer %s: connection broke after %d of %d bytes (%v); resuming", r.desc.Digest, r.off, r.desc.Size, err)
		r.mu.Unlock()
		if n > 0 {
			return n, nil
		}
	}
}

// current is the connection to read, opened at the offset reached.
func (r *resumingReader) current() (io.ReadCloser, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, os.ErrClosed
	}
	if r.rc != nil {
		return r.rc, nil
	}
	var err error
	if r.off == 0 {
		r.rc, err = r.open(r.ctx, r.desc)
	} else {
		r.rc, err = r.openAt(r.ctx, r.desc, r.off)
	}
	return r.rc, err
}

// canResume: the source can, the pull goes on, bytes are missing, and
// resumes are left. The caller holds mu.
func (r *resumingReader) canResume() bool {
	return r.openAt != nil && r.ctx.Err() == nil && r.off < r.desc.Size && r.resumes < maxResumes
}

func (r *resumingReader) offset() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.off
}

// Close closes the connection, which ends a Read blocked in it; nothing is
// read after it.
func (r *resumingReader) Close() error {
	r.mu.Lock()
	r.closed = true
	rc := r.rc
	r.rc = nil
	r.mu.Unlock()
	if rc != nil {
		return rc.Close()
	}
	return nil
}
