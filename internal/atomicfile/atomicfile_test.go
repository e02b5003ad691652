package atomicfile

import (
	"errors"
	"io"
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

func TestWriteStreamAppearsWholeOrNotAtAll(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.tar")
	fill := func(w io.Writer) error { _, err := io.WriteString(w, "whole"); return err }
	for _, round := range []string{"new", "replacing"} {
		if err := WriteStream(path, 0o600, fill); err != nil {
			t.Fatalf("%s: %v", round, err)
		}
		data, err := os.ReadFile(path)
		fi, _ := os.Stat(path)
		if err != nil || string(data) != "whole" || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: read %q, %v, mode %v; want \"whole\" 0600", round, data, err, fi.Mode())
		}
	}
	boom := errors.New("boom")
	err := WriteStream(filepath.Join(dir, "b.tar"), 0o600, func(w io.Writer) error {
		_, _ = io.WriteString(w, "part")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the fill's", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "a.tar" {
		t.Fatalf("dir holds %v, want a.tar alone (nothing of the failed write)", entries)
	}
}
