package testimage

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// SparseFormat is one of the ways tar writes a sparse file. archive/tar
// reads (and expands) all three but writes none, so SparseTar writes the
// blocks itself.
type SparseFormat int

const (
	// SparsePAX1 is GNU tar's PAX format 1.0 (tar --sparse
	// --sparse-version=1.0, the default of GNU tar with --format=pax): the map
	// in front of the data, the name in a GNU.sparse.name record.
	SparsePAX1 SparseFormat = iota
	// SparsePAX01 is GNU tar's PAX format 0.1: the map in a GNU.sparse.map record.
	SparsePAX01
	// SparseGNU is the old GNU format: a type 'S' header with the map in it.
	SparseGNU
)

func (f SparseFormat) String() string {
	return [...]string{"PAX 1.0", "PAX 0.1", "old GNU"}[f]
}

// SparseTar is an uncompressed tar holding one sparse regular file, name,
// of size bytes: data at the offsets of the map (sorted, not overlapping),
// holes everywhere else.
func SparseTar(format SparseFormat, name string, size int64, data map[int64]string) []byte {
	offsets := make([]int64, 0, len(data))
	for off := range data {
		offsets = append(offsets, off)
	}
	sort.Slice(offsets, func(i, j int) bool { return offsets[i] < offsets[j] })
	var frags bytes.Buffer
	var sparseMap []int64 // offset, length, …
	for _, off := range offsets {
		frags.WriteString(data[off])
		sparseMap = append(sparseMap, off, int64(len(data[off])))
	}
	var out bytes.Buffer
	switch format {
	case SparsePAX1:
		var m strings.Builder
		fmt.Fprintf(&m, "%d\n", len(offsets))
		for _, n := range sparseMap {
			fmt.Fprintf(&m, "%d\n", n)
		}
		body := padded([]byte(m.String()))
		body = append(body, frags.Bytes()...)
		writePAX(&out, map[string]string{
			"GNU.sparse.major": "1", "GNU.sparse.minor": "0",
			"GNU.sparse.name": name, "GNU.sparse.realsize": strconv.FormatInt(size, 10),
		})
		writeEntry(&out, rawHeader("GNUSparseFile.0/"+name, '0', int64(len(body)), false), body)
	case SparsePAX01:
		strs := make([]string, len(sparseMap))
		for i, n := range sparseMap {
			strs[i] = strconv.FormatInt(n, 10)
		}
		writePAX(&out, map[string]string{
			"GNU.sparse.size": strconv.FormatInt(size, 10), "GNU.sparse.numblocks": strconv.Itoa(len(offsets)),
			"GNU.sparse.map": strings.Join(strs, ","), "path": name,
		})
		writeEntry(&out, rawHeader(name, '0', int64(frags.Len()), false), frags.Bytes())
	case SparseGNU:
		if len(offsets) > 4 {
			panic("testimage: the old GNU format holds 4 fragments in its header; more need extension blocks")
		}
		h := rawHeader(name, 'S', int64(frags.Len()), true)
		for i := 0; i < len(sparseMap); i += 2 {
			at := 386 + 12*i
			numeric(h[at:at+12], sparseMap[i])
			numeric(h[at+12:at+24], sparseMap[i+1])
		}
		numeric(h[483:495], size)
		setChecksum(h)
		writeEntry(&out, h, frags.Bytes())
	}
	out.Write(make([]byte, 1024)) // the end of the archive
	return out.Bytes()
}

// SparseLayer is a gzip layer holding SparseTar(format, name, size, data).
func SparseLayer(t testing.TB, format SparseFormat, name string, size int64, data map[int64]string) v1.Layer {
	t.Helper()
	return layerFromTar(t, SparseTar(format, name, size, data))
}

// rawHeader is a ustar (or GNU) header block of a root-owned 0644 entry.
func rawHeader(name string, typeflag byte, size int64, gnu bool) []byte {
	h := make([]byte, 512)
	copy(h[0:100], name)
	numeric(h[100:108], 0o644)
	numeric(h[108:116], 0)
	numeric(h[116:124], 0)
	numeric(h[124:136], size)
	numeric(h[136:148], Epoch.Unix())
	h[156] = typeflag
	if gnu {
		copy(h[257:265], "ustar  \x00")
	} else {
		copy(h[257:265], "ustar\x0000")
	}
	setChecksum(h)
	return h
}

// numeric writes n in octal, or in base-256 when it does not fit (as GNU
// tar does for sizes of 8 GiB and more).
func numeric(field []byte, n int64) {
	if s := fmt.Sprintf("%0*o", len(field)-1, n); len(s) == len(field)-1 {
		copy(field, s+"\x00")
		return
	}
	for i := len(field) - 1; i > 0; i-- {
		field[i] = byte(n)
		n >>= 8
	}
	field[0] = 0x80
}

func setChecksum(h []byte) {
	copy(h[148:156], "        ")
	sum := 0
	for _, c := range h {
		sum += int(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
}

// writePAX writes a PAX extended header ('x') with records.
func writePAX(out *bytes.Buffer, records map[string]string) {
	keys := sortedKeys(records)
	var body []byte
	for _, k := range keys {
		rest := " " + k + "=" + records[k] + "\n"
		n := len(rest) + 1
		for len(strconv.Itoa(n))+len(rest) != n {
			n++
		}
		body = append(body, strconv.Itoa(n)+rest...)
	}
	writeEntry(out, rawHeader("././@PaxHeader", 'x', int64(len(body)), false), body)
}

func writeEntry(out *bytes.Buffer, header, body []byte) {
	out.Write(header)
	out.Write(padded(body))
}

func padded(b []byte) []byte {
	if r := len(b) % 512; r != 0 {
		b = append(b, make([]byte, 512-r)...)
	}
	return b
}

// EmptyFilesTar writes an uncompressed tar of n empty files, dNNN/fNNNNNNN
// (a thousand per directory, the directories implicit), streaming: a
// million entries are 512 MB of tar, made in a few hundred milliseconds.
func EmptyFilesTar(w io.Writer, n int) error {
	const nameLen = len("d000/f0000000")
	tmpl := rawHeader(strings.Repeat("0", nameLen), '0', 0, false)
	base := 0 // the checksum without the name
	copy(tmpl[148:156], "        ")
	for i, c := range tmpl {
		if i >= nameLen {
			base += int(c)
		}
	}
	buf := make([]byte, 0, 512*1024)
	for i := range n {
		h := tmpl
		buf = append(buf, h...)
		blk := buf[len(buf)-512:]
		name := fmt.Appendf(blk[:0], "d%03d/f%07d", i%1000, i)
		sum := base
		for _, c := range name {
			sum += int(c)
		}
		_ = fmt.Appendf(blk[148:148], "%06o\x00 ", sum) // writes the checksum field in place
		if len(buf) == cap(buf) || i == n-1 {
			if _, err := w.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	_, err := w.Write(make([]byte, 1024))
	return err
}
