package image

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	tim "github.com/minicri/minicri/test/testimage"
)

// A writable layer's figures: the first ask waits for its walk (briefly),
// later asks answer the last measure while the walker takes a new one, a
// layer slow to walk holds no call, and a removed rootfs is forgotten.
func TestRootfsUsageWalksOutsideTheCall(t *testing.T) {
	defer func(ttl, wait time.Duration) { usageTTL, firstMeasureWait = ttl, wait }(usageTTL, firstMeasureWait)
	usageTTL = time.Hour
	s := newTestStore(t, Options{})
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
	usageTTL = 0
	if _, err := s.RootfsUsage("ctr1"); err != nil {
		t.Fatal(err)
	}
	waitUsage(t, s, "ctr1", func(u FsUsage) bool { return u.UsedBytes >= first.UsedBytes+1<<20 })
	usageTTL = time.Hour
	waitWalkerIdle(t, s) // before walkUpper changes under it

	// A layer slow to walk: the first ask gives up after firstMeasureWait.
	if err := s.PrepareRootfs("ctr2", img.ID); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	walkUpper = func(root string) (uint64, uint64, error) {
		if filepath.Base(filepath.Dir(root)) == "ctr2" {
			<-release
		}
		return diskUsage(root)
	}
	defer func() { waitWalkerIdle(t, s); walkUpper = diskUsage }()
	firstMeasureWait = 50 * time.Millisecond
	if _, err := s.RootfsUsage("ctr2"); !errors.Is(err, ErrNotMeasured) {
		t.Errorf("RootfsUsage of a layer under its first walk = %v, want ErrNotMeasured", err)
	}
	close(release)
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

func waitWalkerIdle(t *testing.T, s *Store) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.rootfsUsage.mu.Lock()
		walking := s.rootfsUsage.walking
		s.rootfsUsage.mu.Unlock()
		if !walking {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the walker still walks after 10 s")
		}
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
