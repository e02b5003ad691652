package conmon

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// The sealed copy has the installed file's bytes, is made once per path,
// and can be neither written nor resized nor unsealed, even by root through
// a new open of its /proc/self/fd link (no ETXTBSY here: nothing runs it).
func TestSealedPauseCannotBeChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), PauseBinaryName)
	want := []byte("#!/bin/sh\nexit 0\n")
	if err := os.WriteFile(path, want, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := sealedPause(path)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := sealedPause(path); err != nil || again != f {
		t.Errorf("second call: %v, %v; want the same copy", again, err)
	}
	link := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	if got, err := os.ReadFile(link); err != nil || !bytes.Equal(got, want) {
		t.Errorf("copy holds %q (%v), want %q", got, err, want)
	}
	if seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0); err != nil || seals&pauseSeals != pauseSeals {
		t.Errorf("seals %#x (%v), want %#x", seals, err, pauseSeals)
	}
	if w, err := os.OpenFile(link, os.O_WRONLY, 0); err == nil {
		_, werr := w.Write([]byte("x"))
		w.Close()
		if werr == nil {
			t.Error("wrote the sealed copy")
		}
	}
	if err := unix.Ftruncate(int(f.Fd()), 0); err == nil {
		t.Error("truncated the sealed copy")
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_EXEC); err == nil {
		t.Error("changed the seals of the sealed copy")
	}
	if _, err := sealedPause(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a copy of a missing file")
	}
}
