package tarfile

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A file of someone else's directory is copied only when it is a regular
// file: a link is not followed, a fifo is not waited on.
func TestAddRegularCopiesOnlyRegularFiles(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := NewWriter(&buf)
	for _, name := range []string{"link", "fifo"} {
		if err := tw.AddRegular(filepath.Join(dir, name), &tar.Header{Name: name, Typeflag: tar.TypeReg}, nil); err == nil {
			t.Errorf("%s was added as a regular file", name)
		}
	}
	if err := tw.AddRegular(secret, &tar.Header{Name: "copy", Typeflag: tar.TypeReg, Mode: 0o600}, nil); err != nil {
		t.Fatal(err)
	}
	other, _ := os.Lstat(filepath.Join(dir, "link"))
	if err := tw.AddRegular(secret, &tar.Header{Name: "x", Typeflag: tar.TypeReg}, other); err == nil {
		t.Error("a file other than the one listed was added")
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	hdr, err := tr.Next()
	if err != nil || hdr.Name != "copy" {
		t.Fatalf("first entry %v, %v; want copy alone", hdr, err)
	}
	if body, _ := io.ReadAll(tr); string(body) != "secret" || hdr.ModTime.IsZero() {
		t.Errorf("copy = %q, mtime %v", body, hdr.ModTime)
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Errorf("more entries than the copy: %v", err)
	}
}

// TestSparseFileCostsWhatItHolds: a file of 64 MiB with two written blocks
// makes an entry of some KiB, which archive/tar reads back as the whole
// file: its data where it was written, zeros elsewhere; GNU tar, where the
// host has it, lists it at its real size.
func TestSparseFileCostsWhatItHolds(t *testing.T) {
	const size = 64 << 20
	dir := t.TempDir()
	path := filepath.Join(dir, "sparse")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	data := map[int64]string{1 << 20: "first block", 40 << 20: "second block"}
	for off, s := range data {
		if _, err := f.WriteAt([]byte(s), off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil || st.Blocks*512 >= size {
		t.Skipf("the file system of %s made no sparse file (%d blocks, %v)", dir, st.Blocks, err)
	}

	var buf bytes.Buffer
	tw := NewWriter(&buf)
	if err := tw.AddRegular(path, &tar.Header{Name: "dir/sparse", Typeflag: tar.TypeReg, Mode: 0o600}, nil); err != nil {
		t.Fatal(err)
	}
	after := filepath.Join(dir, "after")
	if err := os.WriteFile(after, []byte("the next entry"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := tw.AddRegular(after, &tar.Header{Name: "after", Typeflag: tar.TypeReg, Mode: 0o600}, nil); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if got, most := buf.Len(), int(st.Blocks*512)+64<<10; got > most {
		t.Fatalf("archive of a file holding %d bytes on disk is %d bytes, want at most %d", st.Blocks*512, got, most)
	}
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Name != "dir/sparse" || hdr.Size != size {
		t.Fatalf("entry %q of %d bytes, want dir/sparse of %d", hdr.Name, hdr.Size, size)
	}
	chunk, zeros := make([]byte, 1<<20), make([]byte, 1<<20)
	var off int64
	for off < size {
		n, err := io.ReadFull(tr, chunk)
		holeOnly := bytes.Equal(chunk[:n], zeros[:n])
		for i := 0; i < n && !holeOnly; i++ {
			if chunk[i] == 0 {
				continue
			}
			at := off + int64(i)
			found := false
			for o, s := range data {
				if at >= o && at < o+int64(len(s)) && chunk[i] == s[at-o] {
					found = true
				}
			}
			if !found {
				t.Fatalf("byte %d read back = %q, written nothing there", at, chunk[i])
			}
		}
		off += int64(n)
		if err != nil {
			break
		}
	}
	if off != size {
		t.Fatalf("read back %d bytes, want %d", off, size)
	}
	if hdr, err := tr.Next(); err != nil || hdr.Name != "after" {
		t.Fatalf("entry after the sparse one: %v, %v", hdr, err)
	}
	if body, _ := io.ReadAll(tr); string(body) != "the next entry" {
		t.Errorf("entry after the sparse one holds %q", body)
	}
	if gnutar, err := exec.LookPath("tar"); err == nil {
		archive := filepath.Join(dir, "a.tar")
		if err := os.WriteFile(archive, buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(gnutar, "-tvf", archive).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "67108864") || !strings.Contains(string(out), "dir/sparse") {
			t.Errorf("tar -tvf: %v\n%s", err, out)
		}
	}
}
