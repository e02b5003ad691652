package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// Layers are unpacked the way overlayfs wants them: each layer in its own
// directory, whiteouts (".wh.NAME") as 0/0 character devices, opaque
// directories (".wh..wh..opq") marked with the trusted.overlay.opaque xattr.
//
// A layer comes from the network and is hostile until proven otherwise. The
// destination is a fresh directory nobody else writes to, so the unpacker
// knows every directory it made: an entry may only be created in one of
// those. A name that is absolute or has "..", a path through a symlink (or
// any non-directory), a hard link to such a path: the layer is refused. Files
// are streamed to disk, so a huge layer costs no memory; runs of zeros are
// skipped rather than written, so the holes of a sparse entry (which the tar
// reader hands out as zeros) cost no disk either; and the budget bounds what
// the entries declare (see Limits).

// errUnsafeEntry marks a refused layer entry.
var errUnsafeEntry = errors.New("unsafe layer entry")

const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
	opaqueXattr    = "trusted.overlay.opaque"
	// maxZstdWindow bounds the memory a zstd layer can make the decoder take.
	maxZstdWindow = 128 << 20
)

// unpackLayerFile unpacks the layer blob at blobPath (gzip, zstd or plain
// tar) into dest, an empty directory, charging what it unpacks to budget,
// and returns the digest of the uncompressed tar: the diff ID the image
// config must list.
func unpackLayerFile(ctx context.Context, blobPath, dest string, budget *unpackBudget) (v1.Hash, error) {
	f, err := os.Open(blobPath)
	if err != nil {
		return v1.Hash{}, err
	}
	defer f.Close()
	tarStream, closeStream, err := decompress(bufio.NewReaderSize(f, 1<<16))
	if err != nil {
		return v1.Hash{}, err
	}
	defer closeStream()
	h := sha256.New()
	tee := io.TeeReader(tarStream, h)
	if err := extractTar(ctx, tee, dest, budget); err != nil {
		return v1.Hash{}, err
	}
	// The diff ID covers the whole stream, padding after the last entry included.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return v1.Hash{}, fmt.Errorf("read layer: %w", err)
	}
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}, nil
}

// decompress recognises the compression by its magic number.
func decompress(r *bufio.Reader) (io.Reader, func(), error) {
	magic, _ := r.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, fmt.Errorf("gzip layer: %w", err)
		}
		return zr, func() { zr.Close() }, nil
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return nil, nil, fmt.Errorf("zstd layer: %w", err)
		}
		return zr, zr.Close, nil
	default:
		return r, func() {}, nil
	}
}

// extractor writes one layer's entries below dest.
type extractor struct {
	dest     string
	budget   *unpackBudget
	dirs     map[string]bool // directories this layer made, relative ("" is dest)
	dirTimes []dirTime       // applied last: making children changes a dir's mtime
	buf      []byte
}

type dirTime struct {
	path         string
	atime, mtime time.Time
}

func extractTar(ctx context.Context, r io.Reader, dest string, budget *unpackBudget) error {
	x := &extractor{dest: dest, budget: budget, dirs: map[string]bool{"": true}, buf: make([]byte, copyBufSize)}
	tr := tar.NewReader(contextReader{ctx, r})
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return fmt.Errorf("layer entry %q: %w", shortName(hdr.Name), err)
		}
	}
	return x.applyDirTimes()
}

// shortName keeps an error message readable when a hostile name is long.
func shortName(name string) string {
	const keep = 100
	if len(name) <= 2*keep {
		return name
	}
	return name[:keep] + "…" + name[len(name)-keep:]
}

// cleanEntryPath turns a tar name into a path relative to the layer root,
// refusing what could point outside it. "" is the root itself.
func cleanEntryPath(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w: absolute path", errUnsafeEntry)
	}
	var parts []string
	for _, p := range strings.Split(name, "/") {
		switch p {
		case "", ".":
			continue
		case "..":
			return "", fmt.Errorf("%w: path with \"..\"", errUnsafeEntry)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "/"), nil
}

func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	if err := x.budget.addEntry(); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	rel, err := cleanEntryPath(hdr.Name)
	if err != nil {
		return err
	}
	if rel != "" {
		if err := x.budget.checkDepth(strings.Count(rel, "/") + 1); err != nil {
			return err
		}
	}
	if rel == "" {
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("%w: the layer root is not a directory", errUnsafeEntry)
		}
		return x.setMetadata(x.dest, hdr, true)
	}
	parent, base := path.Split(rel)
	parent = strings.TrimSuffix(parent, "/")
	if err := x.ensureDir(parent); err != nil {
		return err
	}
	switch {
	case base == opaqueMarker:
		return x.markOpaque(parent)
	case strings.HasPrefix(base, whiteoutPrefix+whiteoutPrefix):
		return nil // other aufs metadata (.wh..wh.plnk …): nothing for overlay
	case strings.HasPrefix(base, whiteoutPrefix):
		return x.whiteout(parent, strings.TrimPrefix(base, whiteoutPrefix))
	}
	return x.create(rel, hdr, r)
}

func (x *extractor) create(rel string, hdr *tar.Header, r io.Reader) error {
	full := filepath.Join(x.dest, rel)
	if hdr.Typeflag == tar.TypeDir {
		return x.mkdir(rel, hdr)
	}
	if err := x.clear(rel); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
		return x.writeFile(full, hdr, r)
	case tar.TypeSymlink:
		if hdr.Linkname == "" {
			return fmt.Errorf("%w: symlink without a target", errUnsafeEntry)
		}
		// The target is data: it is resolved in the container's root, never here.
		if err := os.Symlink(hdr.Linkname, full); err != nil {
			return err
		}
		return x.setMetadata(full, hdr, false)
	case tar.TypeLink:
		return x.hardlink(full, hdr)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		mode := uint32(hdr.Mode & 0o7777)
		switch hdr.Typeflag {
		case tar.TypeChar:
			mode |= unix.S_IFCHR
		case tar.TypeBlock:
			mode |= unix.S_IFBLK
		default:
			mode |= unix.S_IFIFO
		}
		if err := unix.Mknod(full, mode, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
			return err
		}
		return x.setMetadata(full, hdr, false)
	default:
		return fmt.Errorf("unsupported tar entry type %q", hdr.Typeflag)
	}
}

// ensureDir makes sure rel is a directory this layer made, creating missing
// ones (tar streams may omit parents). Anything else in the way, a symlink
// above all, is refused: following it could lead out of the layer.
func (x *extractor) ensureDir(rel string) error {
	if x.dirs[rel] {
		return nil
	}
	parts := strings.Split(rel, "/")
	for i := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		if x.dirs[prefix] {
			continue
		}
		full := filepath.Join(x.dest, prefix)
		fi, err := os.Lstat(full)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if err := x.budget.addEntry(); err != nil {
				return err
			}
			if err := os.Mkdir(full, 0o755); err != nil {
				return err
			}
		case err != nil:
			return err
		case !fi.IsDir():
			return fmt.Errorf("%w: path goes through %q, which is not a directory (%s)", errUnsafeEntry, prefix, fi.Mode().Type())
		}
		x.dirs[prefix] = true
	}
	return nil
}

func (x *extractor) mkdir(rel string, hdr *tar.Header) error {
	full := filepath.Join(x.dest, rel)
	if !x.dirs[rel] {
		if err := x.clear(rel); err != nil {
			return err
		}
		if err := os.Mkdir(full, 0o700); err != nil {
			return err
		}
		x.dirs[rel] = true
	}
	return x.setMetadata(full, hdr, true)
}

// clear removes what an earlier entry put at rel: in a tar stream, the later
// entry wins. rel's parent is known to be a directory of this layer.
func (x *extractor) clear(rel string) error {
	full := filepath.Join(x.dest, rel)
	fi, err := os.Lstat(full)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return os.Remove(full)
	}
	for d := range x.dirs {
		if d == rel || strings.HasPrefix(d, rel+"/") {
			delete(x.dirs, d)
		}
	}
	return os.RemoveAll(full)
}

// writeFile charges the file's declared size before reading any of it: the
// holes of a sparse entry cost the tar reader the time to hand them out.
func (x *extractor) writeFile(full string, hdr *tar.Header, r io.Reader) error {
	if err := x.budget.addBytes(hdr.Size); err != nil {
		return err
	}
	f, err := os.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if err := writeSparse(f, r, x.buf, hdr.Size); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return x.setMetadata(full, hdr, false)
}

// holeBlock is the unit of zeros left as a hole: the filesystem block,
// below which a hole saves nothing. copyBufSize is a multiple of it, so
// that blocks fall on block boundaries of the file.
const (
	holeBlock   = 4 << 10
	copyBufSize = 128 << 10
)

var zeroBlock [holeBlock]byte

// writeSparse copies size bytes of r to f through buf, writing only the
// blocks that are not all zeros: the others are skipped (pwrite at the next
// data) and the file's size is set at the end, so they stay holes. A sparse
// entry's holes, which the tar reader hands out as zeros, thus cost no disk,
// nor do long runs of zeros stored as data.
func writeSparse(f *os.File, r io.Reader, buf []byte, size int64) error {
	var off, dataEnd int64
	for {
		n, rerr := readBlock(r, buf)
		for i := 0; i < n; {
			end := min(i+holeBlock, n)
			if bytes.Equal(buf[i:end], zeroBlock[:end-i]) {
				i = end
				continue
			}
			for end < n {
				next := min(end+holeBlock, n)
				if bytes.Equal(buf[end:next], zeroBlock[:next-end]) {
					break
				}
				end = next
			}
			if _, err := f.WriteAt(buf[i:end], off+int64(i)); err != nil {
				return err
			}
			dataEnd = off + int64(end)
			i = end
		}
		off += int64(n)
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if off != size {
		return fmt.Errorf("file data of %d bytes, the header says %d", off, size)
	}
	if dataEnd < off {
		return f.Truncate(off) // the file ends in a hole
	}
	return nil
}

// readBlock fills buf from r, short only at the end of r (io.EOF) or on an
// error. Unlike io.ReadFull, a stream cut short (io.ErrUnexpectedEOF from the
// tar reader) stays an error.
func readBlock(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// hardlink links to an earlier entry of this layer, reached through this
// layer's directories only.
func (x *extractor) hardlink(full string, hdr *tar.Header) error {
	target, err := cleanEntryPath(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("hard link target %q: %w", hdr.Linkname, err)
	}
	if target == "" {
		return fmt.Errorf("%w: hard link to the layer root", errUnsafeEntry)
	}
	parent := path.Dir(target)
	if parent == "." {
		parent = ""
	}
	if !x.dirs[parent] {
		return fmt.Errorf("%w: hard link target %q is not inside a directory of this layer", errUnsafeEntry, hdr.Linkname)
	}
	fi, err := os.Lstat(filepath.Join(x.dest, target))
	if err != nil {
		return fmt.Errorf("hard link target %q: %w", hdr.Linkname, err)
	}
	if fi.IsDir() {
		return fmt.Errorf("%w: hard link to directory %q", errUnsafeEntry, hdr.Linkname)
	}
	// link(2) does not follow a symlink target: it links the symlink itself.
	return os.Link(filepath.Join(x.dest, target), full)
}

// whiteout hides name of the layers below: a 0/0 character device.
func (x *extractor) whiteout(parent, name string) error {
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("%w: whiteout of %q", errUnsafeEntry, name)
	}
	rel := path.Join(parent, name)
	if err := x.clear(rel); err != nil {
		return err
	}
	return unix.Mknod(filepath.Join(x.dest, rel), unix.S_IFCHR, 0)
}

func (x *extractor) markOpaque(dir string) error {
	return unix.Lsetxattr(filepath.Join(x.dest, dir), opaqueXattr, []byte("y"), 0)
}

// setMetadata applies owner, mode, xattrs and times. Owner goes before mode
// (chown clears the setuid bit); a directory's times wait for the end.
func (x *extractor) setMetadata(full string, hdr *tar.Header, isDir bool) error {
	if err := os.Lchown(full, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeSymlink {
		if err := os.Chmod(full, tarMode(hdr)); err != nil {
			return err
		}
	}
	if err := setXattrs(full, hdr); err != nil {
		return err
	}
	atime := hdr.AccessTime
	if atime.IsZero() {
		atime = hdr.ModTime
	}
	if isDir {
		x.dirTimes = append(x.dirTimes, dirTime{full, atime, hdr.ModTime})
		return nil
	}
	return setTimes(full, atime, hdr.ModTime)
}

func tarMode(hdr *tar.Header) os.FileMode {
	mode := os.FileMode(hdr.Mode & 0o777)
	if hdr.Mode&0o4000 != 0 {
		mode |= os.ModeSetuid
	}
	if hdr.Mode&0o2000 != 0 {
		mode |= os.ModeSetgid
	}
	if hdr.Mode&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

// setXattrs applies the PAX xattr records. Overlay's own xattrs are dropped:
// from a layer they could redirect lookups to other paths of the host.
func setXattrs(full string, hdr *tar.Header) error {
	for key, value := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(key, "SCHILY.xattr.")
		if !ok || strings.HasPrefix(name, "trusted.overlay.") || strings.HasPrefix(name, "user.overlay.") {
			continue
		}
		err := unix.Lsetxattr(full, name, []byte(value), 0)
		if errors.Is(err, unix.ENOTSUP) {
			continue // the store's filesystem cannot keep it; nothing to do about it
		}
		if err != nil {
			return fmt.Errorf("xattr %s: %w", name, err)
		}
	}
	return nil
}

func setTimes(full string, atime, mtime time.Time) error {
	if mtime.IsZero() {
		return nil // an entry without a time keeps the time of its making
	}
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, full, ts, unix.AT_SYMLINK_NOFOLLOW)
}

func (x *extractor) applyDirTimes() error {
	for i := len(x.dirTimes) - 1; i >= 0; i-- {
		d := x.dirTimes[i]
		if _, err := os.Lstat(d.path); errors.Is(err, os.ErrNotExist) {
			continue // replaced by a later entry
		}
		if err := setTimes(d.path, d.atime, d.mtime); err != nil {
			return err
		}
	}
	return nil
}
