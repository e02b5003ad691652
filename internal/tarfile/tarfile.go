// Package tarfile adds files to tar streams from directories whose content
// someone else controls (a container's upper dir, CRIU's output): without
// following a link, opening nothing but a regular file, and writing what a
// file holds on disk, never more than that.
package tarfile

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Writer is a tar.Writer that can also write sparse entries, which
// archive/tar reads but cannot write: their headers are written here, to
// the stream below it, between two of its entries.
type Writer struct {
	*tar.Writer
	w io.Writer
}

// NewWriter writes a tar stream to w.
func NewWriter(w io.Writer) *Writer { return &Writer{Writer: tar.NewWriter(w), w: w} }

// AddRegular writes hdr and the content of the regular file at path, as
// AddFile does. A link, fifo or device at path is refused, never followed
// or opened for long (O_NONBLOCK); with listed set, so is a file other
// than the one listed.
func (tw *Writer) AddRegular(path string, hdr *tar.Header, listed fs.FileInfo) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	if listed != nil && !os.SameFile(fi, listed) {
		return fmt.Errorf("%s: replaced while read", path)
	}
	return tw.AddFile(f, hdr)
}

// AddFile writes hdr (its Size set here, its ModTime when zero) and the
// content of f, an open regular file, as large as it was at the call (a
// log may grow meanwhile).
//
// A file that holds less on disk than its size (a sparse file: an 8 GiB
// file of one written block) is written as a sparse entry, PAX format 1.0
// as GNU tar writes it: a map of its data segments, then the segments, so
// that the stream costs what the file holds, not what it claims. A reader
// gets the file back whole, holes read as zeros: archive/tar, GNU tar and
// bsdtar read this format (archive/tar cannot write it, so the map is
// written here). A file without holes is a plain entry, as before.
func (tw *Writer) AddFile(f *os.File, hdr *tar.Header) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("%s: %w", f.Name(), err)
	}
	hdr.Size = st.Size
	if hdr.ModTime.IsZero() {
		hdr.ModTime = time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
	}
	if st.Blocks*512 < st.Size {
		segs, err := dataSegments(f, st.Size)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Name(), err)
		}
		if held(segs) < st.Size {
			return tw.addSparse(f, hdr, segs)
		}
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
		return fmt.Errorf("%s: %w", f.Name(), err)
	}
	return nil
}

// segment is a run of a sparse file's data.
type segment struct{ off, len int64 }

func held(segs []segment) int64 {
	var n int64
	for _, s := range segs {
		n += s.len
	}
	return n
}

// dataSegments lists f's data up to size with SEEK_DATA and SEEK_HOLE. A
// file system that cannot tell reports the whole file as data. The list
// grows with the file's data runs, each at least a block on disk.
func dataSegments(f *os.File, size int64) ([]segment, error) {
	fd := int(f.Fd())
	var segs []segment
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // a hole up to the end
		}
		if err != nil {
			return nil, err
		}
		if data >= size {
			break
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return nil, err
		}
		hole = min(hole, size)
		segs = append(segs, segment{data, hole - data})
		off = hole
	}
	return segs, nil
}

// addSparse writes f as a PAX 1.0 sparse entry: an extended header with
// the file's name and real size, an entry named under GNUSparseFile.0
// whose data is the map (its count, then each segment's offset and
// length, one decimal number a line, padded to a block), then the
// segments' bytes.
func (tw *Writer) addSparse(f *os.File, hdr *tar.Header, segs []segment) error {
	sparseMap := strconv.AppendInt(nil, int64(len(segs)), 10)
	sparseMap = append(sparseMap, '\n')
	for _, s := range segs {
		sparseMap = append(strconv.AppendInt(sparseMap, s.off, 10), '\n')
		sparseMap = append(strconv.AppendInt(sparseMap, s.len, 10), '\n')
	}
	sparseMap = append(sparseMap, make([]byte, padding(int64(len(sparseMap))))...)
	dir, file := path.Split(hdr.Name)
	name := path.Join(dir, "GNUSparseFile.0", file)
	size := int64(len(sparseMap)) + held(segs)
	records := map[string]string{
		"GNU.sparse.major":    "1",
		"GNU.sparse.minor":    "0",
		"GNU.sparse.name":     hdr.Name,
		"GNU.sparse.realsize": strconv.FormatInt(hdr.Size, 10),
		"path":                name,
		"size":                strconv.FormatInt(size, 10),
		"uid":                 strconv.Itoa(hdr.Uid),
		"gid":                 strconv.Itoa(hdr.Gid),
		"mtime":               strconv.FormatInt(hdr.ModTime.Unix(), 10),
	}
	var ext []byte
	for _, k := range slices.Sorted(maps.Keys(records)) {
		ext = append(ext, paxRecord(k, records[k])...)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	raw := ustarBlock(path.Join(dir, "PaxHeaders.0", file), tar.TypeXHeader, int64(len(ext)), hdr)
	raw = append(raw, ext...)
	raw = append(raw, make([]byte, padding(int64(len(ext))))...)
	raw = append(raw, ustarBlock(name, tar.TypeReg, size, hdr)...)
	raw = append(raw, sparseMap...)
	if _, err := tw.w.Write(raw); err != nil {
		return err
	}
	for _, s := range segs {
		if n, err := io.Copy(tw.w, io.NewSectionReader(f, s.off, s.len)); err != nil || n != s.len {
			return fmt.Errorf("%s: changed while read (%d of %d bytes at %d: %v)", f.Name(), n, s.len, s.off, err)
		}
	}
	_, err := tw.w.Write(make([]byte, padding(held(segs))))
	return err
}

// blockSize is tar's.
const blockSize = 512

func padding(n int64) int64 { return -n & (blockSize - 1) }

// paxRecord is "LEN KEY=VALUE\n", LEN counting its own digits.
func paxRecord(k, v string) string {
	n := len(k) + len(v) + 3 // ' ', '=', '\n'
	size := n + len(strconv.Itoa(n))
	if len(strconv.Itoa(size)) > len(strconv.Itoa(n)) {
		size++
	}
	return strconv.Itoa(size) + " " + k + "=" + v + "\n"
}

// ustarBlock is a USTAR header block of name, typeflag and size, with
// hdr's mode and times. What does not fit a field (a long name, a large
// size, ID or time) is in the PAX records before it; the field keeps what
// fits, as archive/tar's PAX writer does.
func ustarBlock(name string, typeflag byte, size int64, hdr *tar.Header) []byte {
	b := make([]byte, blockSize)
	octal := func(field []byte, n int64) {
		digits := strconv.FormatInt(n, 8)
		if n < 0 || len(digits) > len(field)-1 {
			digits = "0" // in the PAX records
		}
		copy(field, strings.Repeat("0", len(field)-1-len(digits))+digits)
	}
	copy(b[0:100], name)
	octal(b[100:108], hdr.Mode&0o7777)
	octal(b[108:116], int64(hdr.Uid))
	octal(b[116:124], int64(hdr.Gid))
	octal(b[124:136], size)
	octal(b[136:148], hdr.ModTime.Unix())
	b[156] = typeflag
	copy(b[257:265], "ustar\x0000")
	sum := int64(0)
	copy(b[148:156], "        ")
	for _, c := range b {
		sum += int64(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}
