package fstree

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// outsideDir is a directory beside the tree whose entry names must never
// come out of a walk of the tree.
func outsideDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "host-secret-name"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestWalkFollowsNoLink: a link to a directory outside the tree is an
// entry, never walked; a directory swapped for such a link between being
// listed and being walked (as a running container can) is left out; and
// OpenDir and Lstat refuse a link anywhere on the way.
func TestWalkFollowsNoLink(t *testing.T) {
	outside := outsideDir(t)
	root := t.TempDir()
	for _, d := range []string{"d/sub", "swapped/inner"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "d", "link")); err != nil {
		t.Fatal(err)
	}
	r, err := OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var seen []string
	err = r.Walk("", func(e *Entry) error {
		seen = append(seen, e.Rel)
		if e.Rel == "swapped" {
			// The swap a container makes while its upper dir is walked.
			if err := os.Rename(filepath.Join(root, "swapped"), filepath.Join(root, "gone")); err != nil {
				return err
			}
			return os.Symlink(outside, filepath.Join(root, "swapped"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range seen {
		if strings.Contains(s, "host-secret-name") {
			t.Errorf("walk listed %s, a name of the directory a link points to (all: %v)", s, seen)
		}
	}
	for _, want := range []string{"d", "d/link", "d/sub", "link", "swapped"} {
		if !slices.Contains(seen, want) {
			t.Errorf("walk did not list %s (all: %v)", want, seen)
		}
	}
	for _, rel := range []string{"link", "d/link", "swapped", "link/."} {
		if f, err := r.OpenDir(rel); !errors.Is(err, ErrNotDir) {
			if f != nil {
				f.Close()
			}
			t.Errorf("OpenDir(%s) = %v, want ErrNotDir", rel, err)
		}
	}
	for _, rel := range []string{"link/host-secret-name", "d/link/host-secret-name", "../" + filepath.Base(outside) + "/host-secret-name"} {
		if _, err := r.Lstat(rel); err == nil {
			t.Errorf("Lstat(%s) found the file through a link", rel)
		}
	}
	e, err := r.Lstat("d/link")
	if err != nil || e.Info().Mode()&os.ModeSymlink == 0 {
		t.Errorf("Lstat(d/link) = %v, %v; want the link itself", e, err)
	}
}

// TestOpenRefusesALinkPutInPlace: Open opens the regular file the walk
// saw, never a link or another file put in its place.
func TestOpenRefusesALinkPutInPlace(t *testing.T) {
	outside := outsideDir(t)
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	err = r.Walk("", func(e *Entry) error {
		if err := os.Remove(filepath.Join(root, "f")); err != nil {
			return err
		}
		if err := os.Symlink(filepath.Join(outside, "host-secret-name"), filepath.Join(root, "f")); err != nil {
			return err
		}
		if f, err := e.Open(); err == nil {
			f.Close()
			t.Errorf("Open of %s followed the link put in its place", e.Rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
