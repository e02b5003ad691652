package store

import (
	"os"
	"testing"
	"time"

	"github.com/minicri/minicri/internal/atomicfile"
)

// A write that waits on its fsync must not hold up readers: every container
// exit is a write, and every Get and List of the node would wait behind it.
// Readers keep seeing the old record until the new one is on disk.
func TestReadsDoNotWaitForAWriteSync(t *testing.T) {
	tab, _, err := openTest[record](t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.Put("a", record{Name: "old"}); err != nil {
		t.Fatal(err)
	}
	syncing, release := make(chan struct{}), make(chan struct{})
	tab.write = func(path string, data []byte, perm os.FileMode) error {
		close(syncing)
		<-release // the disk is slow
		return atomicfile.Write(path, data, perm)
	}
	written := make(chan error, 1)
	go func() {
		_, err := tab.Update("a", func(r *record) error { r.Name = "new"; return nil })
		written <- err
	}()
	<-syncing

	read := make(chan record, 1)
	go func() {
		r, _ := tab.Get("a")
		_ = tab.List()
		_, _ = tab.Resolve("a")
		read <- r
	}()
	select {
	case r := <-read:
		if r.Name != "old" {
			t.Errorf("Get during the write's sync = %q, want the record on disk, \"old\"", r.Name)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("Get, List and Resolve still wait for a write's sync after 10s")
	}

	close(release)
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	if r, _ := tab.Get("a"); r.Name != "new" {
		t.Errorf("Get after the write = %q, want \"new\"", r.Name)
	}
}
