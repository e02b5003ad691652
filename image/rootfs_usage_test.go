package image

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	tim "github.com/minicri/minicri/test/testimage"
)

// A writable layer's figures: the first ask waits for its walk (briefly),
// later asks answer the last measure while the walker takes a new one, a
// layer slow to walk holds no call, and a removed rootfs is forgotten.
func TestRootfsUsageWalksOutsideTheCall(t *testing.T) {
	clock := newStoppedClock()
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	defer free() // a failed test leaves no walker waiting
	walk := func(root string) (uint64, uint64, error) {
		if filepath.Base(filepath.Dir(root)) == "ctr2" {
			<-release
		}
		return diskUsage(root)
	}
	s := newTestStore(t, Options{Hooks: Hooks{Now: clock.now, WalkUpper: walk}})
	img := importImages(t, s, map[string]v1.Image{"example.com/multi:1": tim.MultiLayer(t)})[0]
	if err := s.PrepareRootfs("ctr1", img.ID); err != nil {
		t.Fatal(err)
	}
	upper := s.upperDir("ctr1")
	write := func(name string, size int) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(upper, name), make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a", 1<<20)
	first, err := s.RootfsUsage("ctr1")
	if err != nil || first.UsedBytes < 1<<20 || first.InodesUsed < 2 || first.Mountpoint != upper {
		t.Fatalf("first RootfsUsage = %+v, %v; want the 1 MiB written, in %s", first, err, upper)
	}

	// Fresh: answered as it is, however much was written since.
	write("b", 1<<20)
	if got, err := s.RootfsUsage("ctr1"); err != nil || got != first {
		t.Fatalf("fresh RootfsUsage = %+v, %v; want the last measure %+v", got, err, first)
	}
	// Stale: still answered at once; the walk after it sees the write.
	clock.advance(usageTTL)
	if _, err := s.RootfsUsage("ctr1"); err != nil {
		t.Fatal(err)
	}
	waitUsage(t, s, "ctr1", func(u FsUsage) bool { return u.UsedBytes >= first.UsedBytes+1<<20 })

	// A layer slow to walk: the first ask gives up after firstMeasureWait.
	if err := s.PrepareRootfs("ctr2", img.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RootfsUsage("ctr2"); !errors.Is(err, ErrNotMeasured) {
		t.Errorf("RootfsUsage of a layer under its first walk = %v, want ErrNotMeasured", err)
	}
	free()
	waitUsage(t, s, "ctr2", func(u FsUsage) bool { return u.Mountpoint == s.upperDir("ctr2") })

	// Removed: forgotten, and unknown.
	for _, id := range []string{"ctr1", "ctr2"} {
		if err := s.RemoveRootfs(id); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RootfsUsage(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("RootfsUsage of removed %s = %v, want ErrNotFound", id, err)
		}
	}
	s.rootfsUsage.mu.Lock()
	left := len(s.rootfsUsage.byID)
	s.rootfsUsage.mu.Unlock()
	if left != 0 {
		t.Errorf("%d measures kept after every rootfs was removed", left)
	}
}

// waitUsage polls RootfsUsage until ok holds, for at most 10 s.
func waitUsage(t *testing.T, s *Store, id string, ok func(FsUsage) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		u, err := s.RootfsUsage(id)
		if err == nil && ok(u) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("RootfsUsage(%s) = %+v, %v after 10 s: the background walk never came", id, u, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A file of several links is one inode however its links are met, with no
// set of inodes kept: each meeting counts its share.
func TestDiskUsageCountsLinkedFilesOnce(t *testing.T) {
	const block = 4096 // the test files' size: one block on any filesystem here
	cases := []struct {
		name        string
		make        func(t *testing.T, root, outside string)
		wantInodes  uint64 // besides root itself
		wantAtLeast uint64 // bytes, besides root's
	}{
		{"one file, nine links", func(t *testing.T, root, _ string) {
			writeBlock(t, filepath.Join(root, "f"))
			for i := range 8 {
				link(t, filepath.Join(root, "f"), filepath.Join(root, "l"+string(rune('a'+i))))
			}
		}, 1, block},
		{"two files, two links each", func(t *testing.T, root, _ string) {
			for _, f := range []string{"f", "g"} {
				writeBlock(t, filepath.Join(root, f))
				link(t, filepath.Join(root, f), filepath.Join(root, f+"2"))
			}
		}, 2, 2 * block},
		{"a link outside the walk", func(t *testing.T, root, outside string) {
			writeBlock(t, filepath.Join(root, "f"))
			link(t, filepath.Join(root, "f"), filepath.Join(outside, "f"))
		}, 1, block / 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
			for _, d := range []string{root, outside} {
				if err := os.Mkdir(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			emptyBytes, emptyInodes, err := diskUsage(root)
			if err != nil {
				t.Fatal(err)
			}
			c.make(t, root, outside)
			bytes, inodes, err := diskUsage(root)
			if err != nil {
				t.Fatal(err)
			}
			if inodes-emptyInodes != c.wantInodes || bytes-emptyBytes < c.wantAtLeast || bytes-emptyBytes > c.wantAtLeast+block {
				t.Errorf("diskUsage = %d bytes, %d inodes more than empty; want %d inodes, %d bytes (within a block)",
					bytes-emptyBytes, inodes-emptyInodes, c.wantInodes, c.wantAtLeast)
			}
		})
	}
}

func writeBlock(t *testing.T, path string) {
	t.Helper()
	data := make([]byte, 4096)
	data[0] = 1 // not a hole
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func link(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Link(from, to); err != nil {
		t.Fatal(err)
	}
}

// stoppedClock is a Hooks.Now that moves only when told: a measure stays
// fresh however slow the machine, and is stale the moment a test says.
type stoppedClock struct{ at atomic.Int64 }

func newStoppedClock() *stoppedClock {
	c := &stoppedClock{}
	c.at.Store(time.Now().UnixNano())
	return c
}

func (c *stoppedClock) now() time.Time          { return time.Unix(0, c.at.Load()) }
func (c *stoppedClock) advance(d time.Duration) { c.at.Add(int64(d)) }
