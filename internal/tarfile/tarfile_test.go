package tarfile

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
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
	tw := tar.NewWriter(&buf)
	for _, name := range []string{"link", "fifo"} {
		if err := AddRegular(tw, filepath.Join(dir, name), &tar.Header{Name: name, Typeflag: tar.TypeReg}, nil); err == nil {
			t.Errorf("%s was added as a regular file", name)
		}
	}
	if err := AddRegular(tw, secret, &tar.Header{Name: "copy", Typeflag: tar.TypeReg, Mode: 0o600}, nil); err != nil {
		t.Fatal(err)
	}
	other, _ := os.Lstat(filepath.Join(dir, "link"))
	if err := AddRegular(tw, secret, &tar.Header{Name: "x", Typeflag: tar.TypeReg}, other); err == nil {
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
