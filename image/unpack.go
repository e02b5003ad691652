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
	"strings"
	"syscall"
	"unsafe"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"
	"golang.org/x/sys/unix"
)

// Layers are unpacked the way overlayfs wants them: each layer in its own
// directory, whiteouts (".wh.NAME") as 0/0 character devices, opaque
// directories (".wh..wh..opq") marked with the trusted.overlay.opaque xattr.
//
// A layer comes from the network and is hostile until proven otherwise. The
// destination is a fresh directory nobody else writes to, so a directory in
// it is one the unpacker made: an entry may only be created in one of those.
// A name that is absolute or has "..", a path through a symlink (or any
// non-directory), a hard link to such a path: the layer is refused. Memory
// grows with the depth of a path, not with the entries (see extractor), and
// files are streamed to disk, so a huge layer costs no memory; runs of zeros are
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
	return unpackStream(ctx, f, dest, budget, func() {})
}

// unpackStream is unpackLayerFile of a layer blob read from r. The
// decompressors read r ahead in goroutines of their own: when the unpack
// fails for what it found in the layer (not for the stream it read), stop
// is called before they are stopped, and must end a read blocked in r. A
// failure of the stream itself is a *streamError: the decompressor has
// stopped reading r, and r can be read on.
func unpackStream(ctx context.Context, r io.Reader, dest string, budget *unpackBudget, stop func()) (_ v1.Hash, err error) {
	tarStream, closeStream, err := decompress(bufio.NewReaderSize(r, 1<<16))
	if err != nil {
		return v1.Hash{}, err
	}
	defer func() {
		var se *streamError
		if err != nil && !errors.As(err, &se) {
			stop()
		}
		closeStream()
	}()
	h := sha256.New()
	tee := io.TeeReader(streamErrors{tarStream}, h)
	if err := extractTar(ctx, tee, dest, budget); err != nil {
		return v1.Hash{}, err
	}
	// The diff ID covers the whole stream, padding after the last entry included.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return v1.Hash{}, fmt.Errorf("read layer: %w", err)
	}
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}, nil
}

// streamError is a failure to read a layer's (decompressed) stream: a
// corrupt or cut-off blob, a broken connection.
type streamError struct{ err error }

func (e *streamError) Error() string { return e.err.Error() }
func (e *streamError) Unwrap() error { return e.err }

// streamErrors marks the failures of the reader as *streamError.
type streamErrors struct{ r io.Reader }

func (s streamErrors) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = &streamError{err}
	}
	return n, err
}

// The decompressors decode in a goroutine of their own, ahead of the
// unpack (pgzip: gzip cannot be split, so it decodes ahead of its reader;
// zstd: blocks decoded concurrently), so that one layer's unpack keeps both
// CPUs busy: decoding on one, hashing and writing files on the other. Their
// memory is bounded by the blocks in flight, whatever the layer.
// pgzip hands a block on only when it is full, so a block is small: a
// layer whose download stalls has its decoded bytes unpacked, not held.
const (
	gzipBlockSize = 64 << 10
	gzipBlocks    = 8
	zstdDecoders  = 2
)

// decompress recognises the compression by its magic number.
func decompress(r *bufio.Reader) (io.Reader, func(), error) {
	magic, _ := r.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := pgzip.NewReaderN(r, gzipBlockSize, gzipBlocks)
		if err != nil {
			return nil, nil, fmt.Errorf("gzip layer: %w", err)
		}
		return zr, func() { zr.Close() }, nil
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(zstdDecoders), zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return nil, nil, fmt.Errorf("zstd layer: %w", err)
		}
		return zr, zr.Close, nil
	default:
		return r, func() {}, nil
	}
}

// extractor writes one layer's entries below dest. What it keeps from one
// entry to the next grows with the depth of a path, never with the number of
// entries: the directories from dest down to the last entry (cwd), each with
// the times to give it when the stream leaves it. A layer of a million
// directories under 4 KB paths costs what its deepest path costs.
type extractor struct {
	dest   string
	destFD int       // an O_PATH handle of dest, to resolve hard-link targets beneath it
	cwd    []openDir // cwd[0] is dest; each next one a directory inside the one before
	dir    string    // the path of the last of cwd
	budget *unpackBudget
	buf    []byte
}

// openDir is a directory of the current path, checked to be a directory
// made by this layer (never a symlink). Making an entry in it changes its
// mtime, so its times are set when the stream leaves it: the times its
// header gave, or, for a directory the stream comes back to, the times it
// had then.
type openDir struct {
	name  string
	times []unix.Timespec // atime, mtime; nil: none to set
}

func extractTar(ctx context.Context, r io.Reader, dest string, budget *unpackBudget) error {
	destFD, err := unix.Open(dest, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open layer dir: %w", err)
	}
	defer unix.Close(destFD)
	x := &extractor{dest: dest, destFD: destFD, cwd: []openDir{{}}, dir: dest, budget: budget, buf: make([]byte, copyBufSize)}
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
	return x.leave(0)
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
	parts, err := entryParts(name)
	return strings.Join(parts, "/"), err
}

// entryParts splits a tar name into the names of its path below the layer
// root, refusing what could point outside it. None is the root itself.
func entryParts(name string) ([]string, error) {
	if strings.HasPrefix(name, "/") {
		return nil, fmt.Errorf("%w: absolute path", errUnsafeEntry)
	}
	var parts []string
	for _, p := range strings.Split(name, "/") {
		switch p {
		case "", ".":
			continue
		case "..":
			return nil, fmt.Errorf("%w: path with \"..\"", errUnsafeEntry)
		}
		parts = append(parts, p)
	}
	return parts, nil
}

func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	if err := x.budget.addEntry(); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	parts, err := entryParts(hdr.Name)
	if err != nil {
		return err
	}
	if len(parts) == 0 {
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("%w: the layer root is not a directory", errUnsafeEntry)
		}
		if err := x.setMetadata(x.dest, hdr); err != nil {
			return err
		}
		x.cwd[0].times = headerTimes(hdr)
		return nil
	}
	if err := x.budget.checkDepth(len(parts)); err != nil {
		return err
	}
	base := parts[len(parts)-1]
	if err := x.enter(parts[:len(parts)-1]); err != nil {
		return err
	}
	switch {
	case base == opaqueMarker:
		return unix.Lsetxattr(x.dir, opaqueXattr, []byte("y"), 0)
	case strings.HasPrefix(base, whiteoutPrefix+whiteoutPrefix):
		return nil // other aufs metadata (.wh..wh.plnk …): nothing for overlay
	case strings.HasPrefix(base, whiteoutPrefix):
		return x.whiteout(strings.TrimPrefix(base, whiteoutPrefix))
	}
	return x.create(base, hdr, r)
}

// create makes the entry base in the current directory.
func (x *extractor) create(base string, hdr *tar.Header, r io.Reader) error {
	full := x.child(base)
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.mkdir(base, hdr)
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
		return x.writeFile(full, hdr, r)
	}
	if err := removeEntry(full); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeSymlink:
		if hdr.Linkname == "" {
			return fmt.Errorf("%w: symlink without a target", errUnsafeEntry)
		}
		// The target is data: it is resolved in the container's root, never here.
		if err := os.Symlink(hdr.Linkname, full); err != nil {
			return err
		}
		return x.setMetadata(full, hdr)
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
		return x.setMetadata(full, hdr)
	default:
		return fmt.Errorf("unsupported tar entry type %q", hdr.Typeflag)
	}
}

func (x *extractor) child(name string) string { return x.dir + "/" + name }

// enter makes the directory of path (names below dest) the current one:
// it leaves the directories of the current path that are not on the way,
// then goes down, creating the directories that are missing (tar streams
// may omit parents). Anything else in the way, a symlink above all, is
// refused: following it could lead out of the layer. Since dest was empty
// and only this extractor writes in it, a directory there is one this
// layer made.
func (x *extractor) enter(path []string) error {
	same := 0
	for same < len(path) && same+1 < len(x.cwd) && x.cwd[same+1].name == path[same] {
		same++
	}
	if err := x.leave(same + 1); err != nil {
		return err
	}
	for _, name := range path[same:] {
		if err := x.descend(name); err != nil {
			return err
		}
	}
	return nil
}

// descend goes into the directory name of the current one, making it if it
// is missing.
func (x *extractor) descend(name string) error {
	full := x.child(name)
	fi, err := os.Lstat(full)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := x.budget.addEntry(); err != nil {
			return err
		}
		if err := os.Mkdir(full, 0o755); err != nil {
			return err
		}
		x.push(name, nil)
		return nil
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%w: path goes through %q, which is not a directory (%s)", errUnsafeEntry,
			shortName(strings.TrimPrefix(full, x.dest+"/")), fi.Mode().Type())
	}
	// Back in a directory it left: what is made in it now must not change its times.
	st := fi.Sys().(*syscall.Stat_t)
	x.push(name, []unix.Timespec{unix.Timespec(st.Atim), unix.Timespec(st.Mtim)})
	return nil
}

func (x *extractor) push(name string, times []unix.Timespec) {
	x.cwd = append(x.cwd, openDir{name: name, times: times})
	x.dir = x.child(name)
}

// leave goes up the current path until keep directories remain, setting
// each directory's times as it leaves it: nothing more is made in it until
// the stream comes back to it.
func (x *extractor) leave(keep int) error {
	for len(x.cwd) > keep {
		d := x.cwd[len(x.cwd)-1]
		if d.times != nil {
			if err := unix.UtimesNanoAt(unix.AT_FDCWD, x.dir, d.times, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("times of %q: %w", shortName(x.dir), err)
			}
		}
		x.cwd = x.cwd[:len(x.cwd)-1]
		if len(x.cwd) > 0 {
			x.dir = x.dir[:len(x.dir)-len(d.name)-1]
		}
	}
	return nil
}

// mkdir makes (or keeps) the directory base of the current directory and
// enters it: the entries below a directory usually follow it.
func (x *extractor) mkdir(base string, hdr *tar.Header) error {
	full := x.child(base)
	// As for a file, an earlier entry of the name is found by the create
	// failing, not looked for before each directory. mkdir(2) never
	// follows a symlink of that name.
	err := os.Mkdir(full, 0o700)
	if errors.Is(err, os.ErrExist) {
		err = nil
		if fi, lerr := os.Lstat(full); lerr != nil || !fi.IsDir() {
			if err := removeEntry(full); err != nil {
				return err
			}
			err = os.Mkdir(full, 0o700)
		}
	}
	if err != nil {
		return err
	}
	if err := x.setMetadata(full, hdr); err != nil {
		return err
	}
	x.push(base, headerTimes(hdr))
	return nil
}

// removeEntry removes what an earlier entry put at full: in a tar stream,
// the later entry wins. full's parent is the current directory.
func removeEntry(full string) error {
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
	return os.RemoveAll(full)
}

// writeFile charges the file's declared size before reading any of it: the
// holes of a sparse entry cost the tar reader the time to hand them out.
// Whatever an earlier entry put at full goes (the later entry wins), found
// by the create failing rather than looked for before each file. The
// metadata goes through the open file, as tar does, not through its path.
func (x *extractor) writeFile(full string, hdr *tar.Header, r io.Reader) error {
	if err := x.budget.addBytes(hdr.Size); err != nil {
		return err
	}
	fd, err := createFile(full)
	if errors.Is(err, os.ErrExist) {
		if err := removeEntry(full); err != nil {
			return err
		}
		fd, err = createFile(full)
	}
	if err != nil {
		return err
	}
	err = writeSparse(fd, full, r, x.buf, hdr.Size)
	if err == nil {
		err = setFileMetadata(fd, full, hdr)
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = &os.PathError{Op: "close", Path: full, Err: cerr}
	}
	return err
}

// createFile makes a new regular file at full, never through a symlink
// there: O_EXCL fails on any name that exists. It is a plain descriptor,
// not an *os.File: opening and closing an *os.File also tries the
// runtime's poller, which a regular file refuses (four fcntl and an
// epoll_ctl), a third of the system calls a small file costs.
func createFile(full string) (int, error) {
	for {
		fd, err := unix.Open(full, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == nil {
			return fd, nil
		}
		if err != unix.EINTR {
			return -1, &os.PathError{Op: "open", Path: full, Err: err}
		}
	}
}

// setFileMetadata is setMetadata of a regular file through its open
// descriptor fd; full names it in errors.
func setFileMetadata(fd int, full string, hdr *tar.Header) error {
	if err := unix.Fchown(fd, hdr.Uid, hdr.Gid); err != nil {
		return &os.PathError{Op: "fchown", Path: full, Err: err}
	}
	if err := unix.Fchmod(fd, tarMode(hdr)); err != nil {
		return &os.PathError{Op: "fchmod", Path: full, Err: err}
	}
	if err := eachXattr(hdr, func(name string, value []byte) error { return unix.Fsetxattr(fd, name, value, 0) }); err != nil {
		return err
	}
	if ts := headerTimes(hdr); ts != nil {
		return futimens(fd, full, ts)
	}
	return nil
}

// futimens sets the times of the open file fd: utimensat(2) with no path,
// which golang.org/x/sys/unix does not spell.
func futimens(fd int, full string, ts []unix.Timespec) error {
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if errno != 0 {
		return &os.PathError{Op: "futimens", Path: full, Err: errno}
	}
	return nil
}

// holeBlock is the unit of zeros left as a hole: the filesystem block,
// below which a hole saves nothing. copyBufSize is a multiple of it, so
// that blocks fall on block boundaries of the file.
const (
	holeBlock   = 4 << 10
	copyBufSize = 128 << 10
)

var zeroBlock [holeBlock]byte

// writeSparse copies size bytes of r to fd (the file full) through buf,
// writing only the blocks that are not all zeros: the others are skipped
// (pwrite at the next data) and the file's size is set at the end, so they
// stay holes. A sparse entry's holes, which the tar reader hands out as
// zeros, thus cost no disk, nor do long runs of zeros stored as data.
func writeSparse(fd int, full string, r io.Reader, buf []byte, size int64) error {
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
			if err := pwriteAll(fd, full, buf[i:end], off+int64(i)); err != nil {
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
		// The file ends in a hole.
		if err := unix.Ftruncate(fd, off); err != nil {
			return &os.PathError{Op: "truncate", Path: full, Err: err}
		}
	}
	return nil
}

// pwriteAll writes all of p to fd at off.
func pwriteAll(fd int, full string, p []byte, off int64) error {
	for len(p) > 0 {
		n, err := unix.Pwrite(fd, p, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "write", Path: full, Err: err}
		}
		if n == 0 {
			return &os.PathError{Op: "write", Path: full, Err: io.ErrShortWrite}
		}
		p, off = p[n:], off+int64(n)
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

// hardlink links to an earlier entry of this layer, reached from dest
// through directories only: the kernel refuses a path through a symlink or
// out of dest (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS).
func (x *extractor) hardlink(full string, hdr *tar.Header) error {
	target, err := cleanEntryPath(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("hard link target %q: %w", shortName(hdr.Linkname), err)
	}
	if target == "" {
		return fmt.Errorf("%w: hard link to the layer root", errUnsafeEntry)
	}
	parent, base := path.Split(target)
	if parent == "" {
		parent = "."
	}
	dirFD, err := unix.Openat2(x.destFD, parent, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w: hard link target %q is not inside a directory of this layer", errUnsafeEntry, shortName(hdr.Linkname))
	case err != nil:
		return fmt.Errorf("hard link target %q: %w", shortName(hdr.Linkname), err)
	}
	defer unix.Close(dirFD)
	var st unix.Stat_t
	if err := unix.Fstatat(dirFD, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("hard link target %q: %w", shortName(hdr.Linkname), err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("%w: hard link to directory %q", errUnsafeEntry, shortName(hdr.Linkname))
	}
	// link(2) does not follow a symlink target: it links the symlink itself.
	return unix.Linkat(dirFD, base, unix.AT_FDCWD, full, 0)
}

// whiteout hides name of the layers below: a 0/0 character device.
func (x *extractor) whiteout(name string) error {
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("%w: whiteout of %q", errUnsafeEntry, name)
	}
	full := x.child(name)
	if err := removeEntry(full); err != nil {
		return err
	}
	return unix.Mknod(full, unix.S_IFCHR, 0)
}

// setMetadata applies owner, mode, xattrs and times. Owner goes before mode
// (chown clears the setuid bit); a directory's times wait until the stream
// leaves it (see leave).
func (x *extractor) setMetadata(full string, hdr *tar.Header) error {
	if err := os.Lchown(full, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeSymlink {
		if err := unix.Chmod(full, tarMode(hdr)); err != nil {
			return &os.PathError{Op: "chmod", Path: full, Err: err}
		}
	}
	if err := setXattrs(full, hdr); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeDir {
		return nil
	}
	if ts := headerTimes(hdr); ts != nil {
		return unix.UtimesNanoAt(unix.AT_FDCWD, full, ts, unix.AT_SYMLINK_NOFOLLOW)
	}
	return nil
}

// headerTimes are the atime and mtime an entry's header gives, or nil: an
// entry without a time keeps the time of its making.
func headerTimes(hdr *tar.Header) []unix.Timespec {
	if hdr.ModTime.IsZero() {
		return nil
	}
	atime := hdr.AccessTime
	if atime.IsZero() {
		atime = hdr.ModTime
	}
	return []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
}

// tarMode is an entry's permission bits, setuid, setgid and sticky among
// them, as chmod(2) takes them.
func tarMode(hdr *tar.Header) uint32 { return uint32(hdr.Mode) & 0o7777 }

// setXattrs applies the PAX xattr records to full.
func setXattrs(full string, hdr *tar.Header) error {
	return eachXattr(hdr, func(name string, value []byte) error { return unix.Lsetxattr(full, name, value, 0) })
}

// eachXattr applies the PAX xattr records with set. Overlay's own xattrs
// are dropped: from a layer they could redirect lookups to other paths of
// the host.
func eachXattr(hdr *tar.Header, set func(name string, value []byte) error) error {
	for key, value := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(key, "SCHILY.xattr.")
		if !ok || strings.HasPrefix(name, "trusted.overlay.") || strings.HasPrefix(name, "user.overlay.") {
			continue
		}
		err := set(name, []byte(value))
		if errors.Is(err, unix.ENOTSUP) {
			continue // the store's filesystem cannot keep it; nothing to do about it
		}
		if err != nil {
			return fmt.Errorf("xattr %s: %w", name, err)
		}
	}
	return nil
}
