package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplacesContentAndMode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(string, []byte, os.FileMode) error
	}{{"Write", Write}, {"Replace", Replace}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f.json")
			if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := tc.write(path, []byte("new"), 0o644); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != "new" {
				t.Fatalf("content = %q, %v; want \"new\"", got, err)
			}
			st, _ := os.Stat(path)
			if st.Mode().Perm() != 0o644 {
				t.Fatalf("mode = %v, want 0644", st.Mode().Perm())
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Fatalf("dir holds %d entries, want only f.json (no temp file left)", len(entries))
			}
		})
	}
}

func TestWriteFailureLeavesNoTempFile(t *testing.T) {
	dir := t.TempDir()
	// A directory in the way makes the rename fail after the temp file exists.
	path := filepath.Join(dir, "busy")
	if err := os.MkdirAll(filepath.Join(path, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("x"), 0o600); err == nil {
		t.Fatal("Write over a non-empty directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if IsTemp(e.Name()) {
			t.Fatalf("temp file %s left behind", e.Name())
		}
	}
}
