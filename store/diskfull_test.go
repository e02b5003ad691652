package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// smallFS mounts a tmpfs of a few pages for the test, unmounted at its end.
func smallFS(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16k"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

type blob struct{ Data string }

// A write that fails on a full disk keeps the old record, on disk and in
// memory, and leaves no temp file behind.
func TestPutOnFullDiskKeepsOldRecord(t *testing.T) {
	dir := smallFS(t)
	tab, _, err := openTest[blob](dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.Put("id", blob{Data: "small"}); err != nil {
		t.Fatal(err)
	}
	err = tab.Put("id", blob{Data: strings.Repeat("x", 64<<10)})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Put of a record larger than the disk: %v, want ENOSPC", err)
	}
	if got, _ := tab.Get("id"); got.Data != "small" {
		t.Fatalf("in memory after a failed Put: %.20q", got.Data)
	}
	assertOnlyRecords(t, dir, "id.json")
	again, _, err := openTest[blob](dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := again.Get("id"); got.Data != "small" {
		t.Fatalf("on disk after a failed Put: %.20q", got.Data)
	}
}

// Observe keeps a change that happened (a process exited) in memory even
// when the disk refuses it.
func TestObserveOnFullDiskKeepsChangeInMemory(t *testing.T) {
	dir := smallFS(t)
	tab, _, err := openTest[blob](dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.Put("id", blob{Data: "running"}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("exited", 20<<10)
	_, err = tab.Observe("id", func(b *blob) error { b.Data = big; return nil })
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Observe on a full disk: %v, want ENOSPC", err)
	}
	if got, _ := tab.Get("id"); got.Data != big {
		t.Fatal("Observe lost the change when the disk refused it")
	}
	assertOnlyRecords(t, dir, "id.json")
	if _, err := tab.Observe("missing", func(*blob) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Observe of a missing record: %v", err)
	}
}

func assertOnlyRecords(t *testing.T, dir string, want ...string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("files in %s: %v, want %v", filepath.Base(dir), names, want)
	}
}
