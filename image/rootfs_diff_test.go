package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	tim "github.com/minicri/minicri/test/testimage"
)

// TestRootfsDiffRestoresTheContainersView changes a container's rootfs in
// every way overlay records (a new file, a changed one, a deleted one, a
// directory deleted and made again, a link, a fifo), takes the diff,
// applies it to a fresh rootfs of the same image as a restore does (unpack
// the tar, then remove the deleted paths), and finds the same tree.
func TestRootfsDiffRestoresTheContainersView(t *testing.T) {
	s := newTestStore(t, Options{})
	img := importImages(t, s, map[string]v1.Image{"example.com/multi:1": tim.MultiLayer(t)})[0]
	root := prepareMounted(t, s, "ctr1", img.ID)
	p := func(rel string) string { return filepath.Join(root, rel) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(p("tmp/new"), []byte("made\n"), 0o640))
	must(os.WriteFile(p("data/keep"), []byte("changed\n"), 0o644))
	must(os.Remove(p("etc/motd")))
	must(os.RemoveAll(p("opq")))
	must(os.Mkdir(p("opq"), 0o750))
	must(os.WriteFile(p("opq/fresh"), []byte("fresh\n"), 0o644))
	must(os.Symlink("/proc/self/environ", p("data/evil")))
	must(unix.Mkfifo(p("data/fifo"), 0o600))
	// Mount points: their placeholders are not the container's writes.
	must(os.WriteFile(p("etc/hosts"), nil, 0o644))
	must(os.MkdirAll(p("run/secrets/x"), 0o755))
	skip := []string{"/etc/hosts", "/run/secrets"}

	var diff bytes.Buffer
	deleted, err := s.WriteRootfsDiff("ctr1", &diff, skip)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(deleted)
	// opq/old was hidden by the image's own opaque opq already.
	if want := []string{"/etc/motd", "/opq/new"}; !slices.Equal(deleted, want) {
		t.Errorf("deleted = %v, want %v", deleted, want)
	}
	entries := tarEntries(t, diff.Bytes())
	for name, want := range map[string]byte{"tmp/new": tar.TypeReg, "data/keep": tar.TypeReg, "opq/": tar.TypeDir,
		"opq/fresh": tar.TypeReg, "data/evil": tar.TypeSymlink, "data/fifo": tar.TypeFifo} {
		if got, ok := entries[name]; !ok || got != want {
			t.Errorf("diff entry %s: type %q (present %v), want %q", name, got, ok, want)
		}
	}
	for name := range entries {
		if name == "etc/hosts" || strings.HasPrefix(name, "run/secrets") || strings.Contains(name, "motd") {
			t.Errorf("diff has %s: a mount point or a deleted file", name)
		}
	}

	restored := prepareMounted(t, s, "ctr2", img.ID)
	applyDiff(t, restored, diff.Bytes(), deleted)
	want, got := treeOf(t, root, skip), treeOf(t, restored, skip)
	for path, w := range want {
		if got[path] != w {
			t.Errorf("restored %s = %q, want %q", path, got[path], w)
		}
	}
	for path, g := range got {
		if _, ok := want[path]; !ok {
			t.Errorf("restored tree has %s (%s), the container's has not", path, g)
		}
	}
}

func TestRootfsDiffOfAnImageVolumeIsRefused(t *testing.T) {
	s := newTestStore(t, Options{})
	img := importImages(t, s, map[string]v1.Image{"example.com/multi:1": tim.MultiLayer(t)})[0]
	if err := s.PrepareImageVolume("vol", img.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteRootfsDiff("vol", io.Discard, nil); err == nil || !strings.Contains(err.Error(), "image volume") {
		t.Fatalf("err = %v, want a refusal naming the image volume", err)
	}
	if _, err := s.WriteRootfsDiff("nothere", io.Discard, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown rootfs: err = %v, want ErrNotFound", err)
	}
}

func prepareMounted(t *testing.T, s *Store, id, imageID string) string {
	t.Helper()
	if err := s.PrepareRootfs(id, imageID); err != nil {
		t.Fatal(err)
	}
	root, err := s.MountRootfs(id)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func tarEntries(t *testing.T, data []byte) map[string]byte {
	t.Helper()
	out := map[string]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[hdr.Name] = hdr.Typeflag
	}
}

// applyDiff restores as podman's and containerd's restore do: unpack the
// diff over the rootfs, then remove what was deleted.
func applyDiff(t *testing.T, root string, diff []byte, deleted []string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(diff))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(root, hdr.Name)
		mode := hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSticky | fs.ModeSetuid | fs.ModeSetgid)
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, mode)
			if err == nil {
				err = os.Chmod(target, mode)
			}
		case tar.TypeReg:
			_ = os.RemoveAll(target)
			var body []byte
			if body, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(target, body, mode)
			}
		case tar.TypeSymlink:
			_ = os.RemoveAll(target)
			err = os.Symlink(hdr.Linkname, target)
		case tar.TypeFifo:
			_ = os.RemoveAll(target)
			err = unix.Mkfifo(target, uint32(mode.Perm()))
		default:
			err = fmt.Errorf("unexpected entry type %q", hdr.Typeflag)
		}
		if err != nil {
			t.Fatalf("apply %s: %v", hdr.Name, err)
		}
	}
	for _, d := range deleted {
		if err := os.RemoveAll(filepath.Join(root, d)); err != nil {
			t.Fatal(err)
		}
	}
}

// treeOf describes each entry below root (type, mode, content or target),
// but what is at or below skip.
func treeOf(t *testing.T, root string, skip []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(path, root)
		for _, s := range skip {
			if rel == s || strings.HasPrefix(rel, s+"/") {
				return nil
			}
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v", fi.Mode())
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
