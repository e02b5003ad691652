package server

import (
	"os"
	"path/filepath"
	"testing"
)

func TestUnsearchableAbove(t *testing.T) {
	top := t.TempDir()
	open := filepath.Join(top, "open")
	closed := filepath.Join(top, "closed")
	for dir, mode := range map[string]os.FileMode{top: 0o711, open: 0o755, closed: 0o700} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
	}
	// t.TempDir's parents: /tmp and the test's own dir, which Go makes 0700.
	if err := os.Chmod(filepath.Dir(top), 0o711); err != nil {
		t.Fatal(err)
	}
	if got := unsearchableAbove(filepath.Join(open, "stage")); got != "" {
		t.Errorf("below searchable dirs: %q, want none", got)
	}
	if got := unsearchableAbove(filepath.Join(closed, "stage")); got != closed {
		t.Errorf("below a 0700 dir: %q, want %s", got, closed)
	}
}
