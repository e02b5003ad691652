package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	tim "github.com/minicri/minicri/test/testimage"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (ownership, device nodes, trusted xattrs, mounts)")
	}
}

// tarOf builds an uncompressed tar of entries.
func tarOf(t *testing.T, entries ...tim.Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.Header
		h.Format = tar.FormatPAX
		if h.ModTime.IsZero() {
			h.ModTime = tim.Epoch
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("tar header %s: %v", h.Name, err)
		}
		if _, err := tw.Write(e.Body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeBlobFile(t *testing.T, content []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zstded(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestUnpackRefusesHostileLayers unpacks crafted layers into box/a/dest and
// checks that each is refused and that nothing appears outside dest.
func TestUnpackRefusesHostileLayers(t *testing.T) {
	requireRoot(t)
	xattrEntry := tim.File("x", "x", 0o644)
	xattrEntry.Header.PAXRecords = map[string]string{"SCHILY.xattr.trusted.overlay.redirect": "/etc"}
	cases := []struct {
		name    string
		entries []tim.Entry
		outside string // a path (relative to box) that must not exist afterwards
	}{
		{"dot-dot", []tim.Entry{tim.File("../../pwned", "x", 0o644)}, "pwned"},
		{"dot-dot inside", []tim.Entry{tim.Dir("d", 0o755), tim.File("d/../../pwned", "x", 0o644)}, "a/pwned"},
		{"absolute", []tim.Entry{tim.File("/pwned", "x", 0o644)}, "pwned"},
		{"symlink escape", []tim.Entry{tim.Symlink("evil", "../.."), tim.File("evil/pwned", "x", 0o644)}, "pwned"},
		{"absolute symlink escape", []tim.Entry{tim.Symlink("evil", "/"), tim.Dir("evil/tmp", 0o755), tim.File("evil/tmp/pwned", "x", 0o644)}, "pwned"},
		{"symlink then file below", []tim.Entry{tim.Symlink("etc", "/etc"), tim.File("etc/pwned", "x", 0o644)}, "pwned"},
		{"hardlink outside", []tim.Entry{tim.Hardlink("hl", "../../secret")}, "a/dest/hl"},
		{"hardlink absolute", []tim.Entry{tim.Hardlink("hl", "/etc/passwd")}, "a/dest/hl"},
		{"hardlink through symlink", []tim.Entry{tim.Symlink("evil", "../.."), tim.Hardlink("hl", "evil/secret")}, "a/dest/hl"},
		{"whiteout of dot-dot", []tim.Entry{tim.File(".wh..", "", 0o644)}, ""},
		{"opaque marker with dot-dot", []tim.Entry{tim.File("a/../../.wh..wh..opq", "", 0o644)}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			box := t.TempDir()
			dest := filepath.Join(box, "a", "dest")
			if err := os.MkdirAll(dest, 0o755); err != nil {
				t.Fatal(err)
			}
			secret := filepath.Join(box, "secret")
			if err := os.WriteFile(secret, []byte("secret"), 0o600); err != nil {
				t.Fatal(err)
			}
			blob := writeBlobFile(t, tarOf(t, tc.entries...))
			_, err := unpackLayerFile(t.Context(), blob, dest, newBudget(Limits{}))
			if !errors.Is(err, errUnsafeEntry) {
				t.Fatalf("unpack = %v, want an unsafe-entry error", err)
			}
			if tc.outside != "" {
				if _, err := os.Lstat(filepath.Join(box, tc.outside)); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s exists after a refused unpack (lstat: %v)", tc.outside, err)
				}
			}
			var st unix.Stat_t
			if err := unix.Stat(secret, &st); err != nil || st.Nlink != 1 {
				t.Fatalf("secret outside the layer: nlink %d, err %v", st.Nlink, err)
			}
		})
	}
	t.Run("overlay xattrs dropped", func(t *testing.T) {
		dest := t.TempDir()
		if _, err := unpackLayerFile(t.Context(), writeBlobFile(t, tarOf(t, xattrEntry)), dest, newBudget(Limits{})); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Lgetxattr(filepath.Join(dest, "x"), "trusted.overlay.redirect", make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
			t.Fatalf("trusted.overlay.redirect from the layer was applied (err %v)", err)
		}
	})
}

// TestUnpackKeepsEverything checks modes, owners, xattrs, times, links,
// devices and the overlay form of whiteouts, for each compression.
func TestUnpackKeepsEverything(t *testing.T) {
	requireRoot(t)
	mtime := time.Date(2020, 2, 3, 4, 5, 6, 0, time.UTC)
	owned := tim.File("dir/owned", "owned", 0o640)
	owned.Header.Uid, owned.Header.Gid = 1000, 1001
	owned.Header.ModTime = mtime
	owned.Header.PAXRecords = map[string]string{"SCHILY.xattr.user.note": "hello"}
	suid := tim.File("dir/suid", "#!", 0o4755)
	dir := tim.Dir("dir", 0o750)
	dir.Header.ModTime = mtime
	fifo := tim.Entry{Header: tar.Header{Typeflag: tar.TypeFifo, Name: "dir/fifo", Mode: 0o600}}
	raw := tarOf(t,
		dir, owned, suid,
		tim.Symlink("dir/link", "/etc/passwd"),
		tim.Hardlink("dir/hard", "dir/owned"),
		tim.CharDevice("dir/null", 1, 3),
		fifo,
		tim.File("implicit/parent/file", "x", 0o644),
		tim.Whiteout("dir/gone"),
		tim.Dir("opq", 0o755),
		tim.Opaque("opq"),
		tim.File("replaced", "first", 0o644),
		tim.File("replaced", "second", 0o644),
	)
	sum := sha256.Sum256(raw)
	wantDiffID := "sha256:" + hex.EncodeToString(sum[:])
	for _, comp := range []struct {
		name string
		blob []byte
	}{{"plain", raw}, {"gzip", gzipped(t, raw)}, {"zstd", zstded(t, raw)}} {
		t.Run(comp.name, func(t *testing.T) {
			dest := t.TempDir()
			diffID, err := unpackLayerFile(t.Context(), writeBlobFile(t, comp.blob), dest, newBudget(Limits{}))
			if err != nil {
				t.Fatalf("unpack: %v", err)
			}
			if diffID.String() != wantDiffID {
				t.Fatalf("diff ID %s, want %s", diffID, wantDiffID)
			}
			checkUnpacked(t, dest, mtime)
		})
	}
}

func checkUnpacked(t *testing.T, dest string, mtime time.Time) {
	t.Helper()
	p := func(rel string) string { return filepath.Join(dest, rel) }
	var st unix.Stat_t
	mustLstat := func(rel string) unix.Stat_t {
		t.Helper()
		if err := unix.Lstat(p(rel), &st); err != nil {
			t.Fatalf("lstat %s: %v", rel, err)
		}
		return st
	}
	if s := mustLstat("dir/owned"); s.Uid != 1000 || s.Gid != 1001 || s.Mode&0o7777 != 0o640 || s.Nlink != 2 {
		t.Errorf("dir/owned: uid %d gid %d mode %o nlink %d, want 1000 1001 640 2", s.Uid, s.Gid, s.Mode&0o7777, s.Nlink)
	}
	if s := mustLstat("dir/owned"); time.Unix(s.Mtim.Unix()).UTC() != mtime {
		t.Errorf("dir/owned mtime %v, want %v", time.Unix(s.Mtim.Unix()).UTC(), mtime)
	}
	if s := mustLstat("dir"); s.Mode&0o7777 != 0o750 || time.Unix(s.Mtim.Unix()).UTC() != mtime {
		t.Errorf("dir: mode %o mtime %v, want 750 %v (set after its children)", s.Mode&0o7777, time.Unix(s.Mtim.Unix()).UTC(), mtime)
	}
	if s := mustLstat("dir/suid"); s.Mode&0o7777 != 0o4755 {
		t.Errorf("dir/suid mode %o, want 4755", s.Mode&0o7777)
	}
	if target, err := os.Readlink(p("dir/link")); err != nil || target != "/etc/passwd" {
		t.Errorf("dir/link → %q (%v), want /etc/passwd", target, err)
	}
	if a, b := mustLstat("dir/owned").Ino, mustLstat("dir/hard").Ino; a != b {
		t.Errorf("dir/hard is not a hard link of dir/owned")
	}
	if s := mustLstat("dir/null"); s.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(s.Rdev) != 1 || unix.Minor(s.Rdev) != 3 {
		t.Errorf("dir/null: mode %o rdev %d:%d, want a 1:3 char device", s.Mode, unix.Major(s.Rdev), unix.Minor(s.Rdev))
	}
	if s := mustLstat("dir/fifo"); s.Mode&unix.S_IFMT != unix.S_IFIFO {
		t.Errorf("dir/fifo is not a fifo (mode %o)", s.Mode)
	}
	if s := mustLstat("dir/gone"); s.Mode&unix.S_IFMT != unix.S_IFCHR || s.Rdev != 0 {
		t.Errorf("whiteout dir/gone: mode %o rdev %d, want a 0:0 char device", s.Mode, s.Rdev)
	}
	buf := make([]byte, 16)
	if n, err := unix.Lgetxattr(p("opq"), opaqueXattr, buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("opq: %s = %q (%v), want y", opaqueXattr, buf[:n], err)
	}
	if _, err := os.Lstat(p("opq/.wh..wh..opq")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the opaque marker itself was written")
	}
	if n, err := unix.Lgetxattr(p("dir/owned"), "user.note", buf); err != nil || string(buf[:n]) != "hello" {
		t.Errorf("dir/owned xattr user.note = %q (%v), want hello", buf[:n], err)
	}
	if b, err := os.ReadFile(p("implicit/parent/file")); err != nil || string(b) != "x" {
		t.Errorf("file under implicit parents: %q %v", b, err)
	}
	if b, err := os.ReadFile(p("replaced")); err != nil || string(b) != "second" {
		t.Errorf("replaced = %q (%v), want the later entry", b, err)
	}
}

// TestUnpackStreamsLargeFiles unpacks a layer holding a 128 MiB file and
// checks that memory did not grow with it.
func TestUnpackStreamsLargeFiles(t *testing.T) {
	requireRoot(t)
	const size = 128 << 20
	var raw bytes.Buffer
	zw := gzip.NewWriter(&raw)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "big", Mode: 0o644, Size: size})
	zero := make([]byte, 1<<20)
	for range size / len(zero) {
		tw.Write(zero)
	}
	tw.Close()
	zw.Close()
	blob := writeBlobFile(t, raw.Bytes())
	dest := t.TempDir()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := unpackLayerFile(t.Context(), blob, dest, newBudget(Limits{})); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 16<<20 {
		t.Fatalf("unpacking a %d MiB file allocated %d MiB", size>>20, grown>>20)
	}
	if fi, err := os.Stat(filepath.Join(dest, "big")); err != nil || fi.Size() != size {
		t.Fatalf("big: %v, size %d", err, fi.Size())
	}
}

func TestChainIDs(t *testing.T) {
	d := func(s string) string { sum := sha256.Sum256([]byte(s)); return "sha256:" + hex.EncodeToString(sum[:]) }
	var diffIDs []v1.Hash
	for _, s := range []string{d("a"), d("b"), d("c")} {
		h, err := v1.NewHash(s)
		if err != nil {
			t.Fatal(err)
		}
		diffIDs = append(diffIDs, h)
	}
	chains := chainIDs(diffIDs)
	want1 := d(d("a") + " " + d("b"))
	want2 := d(want1 + " " + d("c"))
	if chains[0] != diffIDs[0] || chains[1].String() != want1 || chains[2].String() != want2 {
		t.Fatalf("chain IDs %v, want [%s %s %s]", chains, diffIDs[0], want1, want2)
	}
}

// liveHeapReader reads r and, every `every` bytes, collects garbage and
// records the live heap: what the reader of r keeps, sampled along the way.
type liveHeapReader struct {
	r           io.Reader
	every, next int
	peak        uint64
}

func (l *liveHeapReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	if l.next -= n; l.next <= 0 {
		l.next = l.every
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		l.peak = max(l.peak, ms.HeapAlloc)
	}
	return n, err
}

// TestUnpackMemoryGrowsWithDepthNotEntries unpacks 10,000 directories under
// 4 KB paths (45 MB of tar, generated as it is read). An unpacker that keeps
// each directory's path holds 80 MB by the end of it; this one holds what
// one path costs, so the live heap stays at what the test itself holds.
func TestUnpackMemoryGrowsWithDepthNotEntries(t *testing.T) {
	requireRoot(t)
	const dirs, pathLen = 10_000, 3900
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tim.DeepDirsTar(pw, dirs, pathLen)) }()
	defer pr.Close()
	dest := t.TempDir()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	probe := &liveHeapReader{r: pr, every: 4 << 20}
	if err := extractTar(t.Context(), probe, dest, newBudget(Limits{})); err != nil {
		t.Fatalf("unpack: %v", err)
	}
	if grown := int64(probe.peak) - int64(before.HeapAlloc); grown > 8<<20 {
		t.Errorf("the live heap grew by %d MiB while unpacking %d directories", grown>>20, dirs)
	}
	// The directories are all there, with the times of their headers,
	// set after their children were made.
	bottom := dest
	for {
		entries, err := os.ReadDir(bottom)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 {
			if len(entries) != dirs {
				t.Fatalf("%d directories at the bottom, want %d", len(entries), dirs)
			}
			if fi, err := entries[dirs-1].Info(); err != nil || !fi.ModTime().Equal(tim.Epoch) {
				t.Fatalf("last directory: mtime %v (%v), want %v", fi.ModTime(), err, tim.Epoch)
			}
			break
		}
		bottom = filepath.Join(bottom, entries[0].Name())
		if fi, err := os.Lstat(bottom); err != nil || !fi.ModTime().Equal(tim.Epoch) {
			t.Fatalf("%s: mtime %v (%v), want %v", bottom[len(dest):][:40], fi.ModTime(), err, tim.Epoch)
		}
	}
}

// TestUnpackDirTimesWhenTheStreamComesBack checks the times of directories
// that the stream leaves and comes back to, and of a directory whose entry
// follows its children: each ends with the time of its header.
func TestUnpackDirTimesWhenTheStreamComesBack(t *testing.T) {
	requireRoot(t)
	at := func(day int) time.Time { return time.Date(2021, 1, day, 0, 0, 0, 0, time.UTC) }
	dir := func(name string, day int) tim.Entry {
		e := tim.Dir(name, 0o755)
		e.Header.ModTime = at(day)
		return e
	}
	raw := tarOf(t,
		dir(".", 1),
		dir("a", 2),
		dir("a/deep", 3),
		dir("b", 4),
		tim.File("a/x", "x", 0o644),          // back in a
		tim.File("a/deep/y", "y", 0o644),     // back in a/deep
		tim.File("c/z", "z", 0o644),          // c is implicit here…
		dir("c", 5),                          // …and given a time after its child
		tim.File("b/gone", "", 0o644),        // back in b
		tim.Whiteout("b/gone"),               // replaced
		tim.File("a/deep/y", "again", 0o644), // replaced, in a dir left twice
	)
	dest := t.TempDir()
	if _, err := unpackLayerFile(t.Context(), writeBlobFile(t, raw), dest, newBudget(Limits{})); err != nil {
		t.Fatal(err)
	}
	for rel, day := range map[string]int{".": 1, "a": 2, "a/deep": 3, "b": 4, "c": 5} {
		fi, err := os.Lstat(filepath.Join(dest, rel))
		if err != nil || !fi.ModTime().Equal(at(day)) {
			t.Errorf("%s: mtime %v (%v), want %v", rel, fi.ModTime(), err, at(day))
		}
	}
}

// BenchmarkUnpack unpacks gzipped layers of the shapes images have: the
// busybox layer (one binary, 80 symlinks), 10,000 small files in 100
// directories in the order a build writes them, and the same files with
// each entry in another directory than the one before (the worst order for
// an unpacker that keeps only the current path).
func BenchmarkUnpack(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	busybox, err := tim.BusyboxLayer(b).Uncompressed()
	if err != nil {
		b.Fatal(err)
	}
	busyboxTar, err := io.ReadAll(busybox)
	if err != nil {
		b.Fatal(err)
	}
	files := func(interleaved bool) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		dir := func(d int) {
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: fmt.Sprintf("d%02d/", d), Mode: 0o755, ModTime: tim.Epoch})
		}
		body := bytes.Repeat([]byte("x"), 1000)
		for i := range 10_000 {
			d, f := i/100, i%100
			if interleaved {
				d, f = i%100, i/100
			}
			if f == 0 {
				dir(d)
			}
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("d%02d/f%02d", d, f), Mode: 0o644, Size: int64(len(body)), ModTime: tim.Epoch})
			tw.Write(body)
		}
		tw.Close()
		return buf.Bytes()
	}
	for _, l := range []struct {
		name string
		tar  []byte
	}{{"busybox", busyboxTar}, {"10k files", files(false)}, {"10k files interleaved", files(true)}} {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(l.tar)
		zw.Close()
		blob := filepath.Join(b.TempDir(), "blob")
		if err := os.WriteFile(blob, gz.Bytes(), 0o600); err != nil {
			b.Fatal(err)
		}
		b.Run(l.name, func(b *testing.B) {
			for b.Loop() {
				dest, err := os.MkdirTemp(b.TempDir(), "")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := unpackLayerFile(b.Context(), blob, dest, newBudget(Limits{})); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A file whose name an earlier entry of the layer made a symlink (or a
// directory) replaces it: the later entry wins, and nothing is written
// through the link.
func TestUnpackFileReplacesALinkOrDirOfItsName(t *testing.T) {
	requireRoot(t)
	box := t.TempDir()
	secret := filepath.Join(box, "secret")
	if err := os.WriteFile(secret, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(box, "dest")
	if err := os.Mkdir(dest, 0o755); err != nil {
		t.Fatal(err)
	}
	blob := writeBlobFile(t, tarOf(t,
		tim.Symlink("link", secret), tim.File("link", "new", 0o644),
		tim.Dir("dir", 0o755), tim.File("dir/below", "x", 0o644), tim.File("dir", "new", 0o640)))
	if _, err := unpackLayerFile(t.Context(), blob, dest, newBudget(Limits{})); err != nil {
		t.Fatalf("unpack: %v", err)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "secret" {
		t.Fatalf("the link's target: %q (%v), want it untouched", b, err)
	}
	for name, mode := range map[string]os.FileMode{"link": 0o644, "dir": 0o640} {
		fi, err := os.Lstat(filepath.Join(dest, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != mode {
			t.Fatalf("%s: %v (%v), want a regular file of mode %o", name, fi.Mode(), err, mode)
		}
		if b, _ := os.ReadFile(filepath.Join(dest, name)); string(b) != "new" {
			t.Fatalf("%s holds %q, want the later entry's", name, b)
		}
	}
}

// TestUnpackClosesEveryFile: the unpack writes a regular file through a
// plain descriptor, which no finalizer closes, so each way out of a file's
// writing must close it: done, the data cut short, the metadata refused.
func TestUnpackClosesEveryFile(t *testing.T) {
	requireRoot(t)
	whole := tarOf(t, tim.Dir("d", 0o755), tim.File("d/a", "aaaa", 0o644), tim.File("d/b", string(make([]byte, 64<<10)), 0o644))
	bigXattr := tim.File("x", "x", 0o644)
	bigXattr.Header.PAXRecords = map[string]string{"SCHILY.xattr.user.big": string(make([]byte, 70<<10))} // over XATTR_SIZE_MAX: E2BIG
	cases := []struct {
		name    string
		layer   []byte
		wantErr bool
	}{
		{"unpacked", whole, false},
		{"data cut short", whole[:len(whole)-1024-32<<10], true},
		{"xattr refused", tarOf(t, bigXattr), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := openFDs(t)
			_, err := unpackLayerFile(t.Context(), writeBlobFile(t, tc.layer), t.TempDir(), newBudget(Limits{}))
			if (err != nil) != tc.wantErr {
				t.Fatalf("unpack = %v, want an error: %v", err, tc.wantErr)
			}
			if after := openFDs(t); after != before {
				t.Fatalf("%d descriptors open after the unpack, %d before", after, before)
			}
		})
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// TestCreatedFilesAreCloseOnExec: the daemon starts runc and the monitors
// while pulls unpack, so a layer file's descriptor must not be inherited
// by what it starts.
func TestCreatedFilesAreCloseOnExec(t *testing.T) {
	fd, err := createFile(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("descriptor flags %#x (err %v), want FD_CLOEXEC", flags, err)
	}
}

// TestUnpackDirReplacesWhatIsNotADir: a directory entry whose name an
// earlier entry made a symlink or a file replaces it, and the entries below
// it land in the new directory, never through the link; a directory the
// stream names again is kept with what it holds.
func TestUnpackDirReplacesWhatIsNotADir(t *testing.T) {
	requireRoot(t)
	box := t.TempDir()
	dest := filepath.Join(box, "dest")
	if err := os.Mkdir(dest, 0o755); err != nil {
		t.Fatal(err)
	}
	blob := writeBlobFile(t, tarOf(t,
		tim.Symlink("ldir", box), tim.Dir("ldir", 0o755), tim.File("ldir/below", "x", 0o644),
		tim.File("fdir", "x", 0o644), tim.Dir("fdir", 0o750),
		tim.Dir("again", 0o700), tim.File("again/kept", "x", 0o644), tim.Dir("again", 0o755)))
	if _, err := unpackLayerFile(t.Context(), blob, dest, newBudget(Limits{})); err != nil {
		t.Fatalf("unpack: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(box, "below")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an entry below the replaced link landed where the link pointed (lstat: %v)", err)
	}
	for name, mode := range map[string]os.FileMode{"ldir": 0o755, "fdir": 0o750, "again": 0o755} {
		fi, err := os.Lstat(filepath.Join(dest, name))
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != mode {
			t.Fatalf("%s: %v (%v), want a directory of mode %o", name, fi.Mode(), err, mode)
		}
	}
	for _, name := range []string{"ldir/below", "again/kept"} {
		if _, err := os.Lstat(filepath.Join(dest, name)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
