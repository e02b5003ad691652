package image

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/minicri/minicri/test/registry"
	tim "github.com/minicri/minicri/test/testimage"
)

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Errorf("%s: not within %v", what, timeout)
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func randomString(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// heldReader passes `after` bytes, then holds the stream until release is
// closed (or fails once cancel is, like a connection the client dropped).
type heldReader struct {
	io.ReadCloser
	after   int
	reached chan struct{} // closed when `after` bytes have passed
	release <-chan struct{}
	once    sync.Once
}

func (h *heldReader) Read(p []byte) (int, error) {
	if h.after <= 0 {
		h.once.Do(func() { close(h.reached) })
		<-h.release
		return h.ReadCloser.Read(p)
	}
	if len(p) > h.after {
		p = p[:h.after]
	}
	n, err := h.ReadCloser.Read(p)
	h.after -= n
	return n, err
}

// holdLayer makes the proxy hold the download of blob digest after
// `after` bytes until release is closed.
func holdLayer(px *proxy, digest string, after int, release <-chan struct{}) *heldReader {
	held := &heldReader{after: after, reached: make(chan struct{}), release: release}
	px.setTamper(func(d string, body io.ReadCloser) io.ReadCloser {
		if d != digest {
			return body
		}
		held.ReadCloser = body
		return held
	})
	return held
}

// pullAsync pulls ref in a goroutine; the channel has its error.
func pullAsync(ctx context.Context, s *Store, ref string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := s.Pull(ctx, ref, nil)
		done <- err
	}()
	return done
}

// tmpLayerFiles counts the files below the store's temp layer dirs: what
// an unpack under way has written.
func tmpLayerFiles(s *Store) int {
	n := 0
	dirs, _ := filepath.Glob(filepath.Join(s.path(tmpDir), "layer-*"))
	for _, d := range dirs {
		filepath.WalkDir(d, func(_ string, e os.DirEntry, err error) error {
			if err == nil && !e.IsDir() {
				n++
			}
			return nil
		})
	}
	return n
}

// A layer is unpacked as its bytes arrive: with its download held half-way,
// the files of its first half are already in its temp dir. The whole pull
// then succeeds.
func TestPullUnpacksWhileDownloading(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	var entries []tim.Entry
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		entries = append(entries, tim.File("data/"+name, randomString(t, 64<<10), 0o644))
	}
	img := tim.Image(t, []v1.Layer{tim.Layer(t, entries...)})
	p := push(t, reg, "stream:1", img)
	px := startProxy(t, reg.Host())
	layer := layerDigests(t, img)[0]
	release := make(chan struct{})
	held := holdLayer(px, layer, 320<<10, release)
	s := newTestStore(t, Options{})
	done := pullAsync(testContext(t), s, px.host()+"/stream:1")
	<-held.reached
	waitFor(t, "files of the layer's first half unpacked while its download waits", 20*time.Second,
		func() bool { return tmpLayerFiles(s) >= 2 })
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("pull: %v", err)
	}
	got, err := s.Get(px.host() + "/stream:1")
	if err != nil || got.ID != p.configID {
		t.Fatalf("Get = %s, %v; want %s", got.ID, err, p.configID)
	}
	if !blobExists(s, layer) {
		t.Fatal("the streamed layer's blob was not kept")
	}
}

// A connection that breaks mid-layer is resumed with a range request from
// the byte it stopped at; the pull succeeds with the blob checked whole.
func TestPullResumesABrokenLayerDownload(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	img := incompressible(t, 1<<20)
	p := push(t, reg, "resume:1", img)
	px := startProxy(t, reg.Host())
	layer := layerDigests(t, img)[0]
	px.setTamper(func(digest string, body io.ReadCloser) io.ReadCloser {
		if digest != layer {
			return body
		}
		// Only the first answer (200) is cut: a resumed one is a 206.
		return &cutReader{ReadCloser: body, after: 256 << 10, cut: func() {}}
	})
	s := newTestStore(t, Options{})
	got, err := s.Pull(testContext(t), px.host()+"/resume:1", nil)
	if err != nil {
		t.Fatalf("pull through a connection broken mid-layer: %v", err)
	}
	if got.ID != p.configID {
		t.Fatalf("pulled %s, want %s", got.ID, p.configID)
	}
	ranges := px.rangesOf(layer)
	if len(ranges) != 1 || !strings.HasPrefix(ranges[0], "bytes=") || ranges[0] == "bytes=0-" {
		t.Fatalf("range requests of the layer: %q, want one from the byte the connection broke at", ranges)
	}
	if n := px.gets()[layer]; n != 2 {
		t.Fatalf("layer downloads: %d, want 2 (the broken one and its rest)", n)
	}
	if !blobExists(s, layer) {
		t.Fatal("the resumed blob was not kept")
	}
}

// A resumed download whose rest is not the blob's (here a registry that
// changed a byte of it) is a digest mismatch, and nothing stays.
func TestPullResumedLayerIsCheckedWhole(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	img := incompressible(t, 1<<20)
	push(t, reg, "resumebad:1", img)
	px := startProxy(t, reg.Host())
	layer := layerDigests(t, img)[0]
	var mu sync.Mutex
	first := true
	px.setTamper(func(digest string, body io.ReadCloser) io.ReadCloser {
		if digest != layer {
			return body
		}
		mu.Lock()
		defer mu.Unlock()
		if first {
			first = false
			return &cutReader{ReadCloser: body, after: 256 << 10, cut: func() {}}
		}
		return body
	})
	// The rest comes as a 206, which the tamper above does not see: flip
	// a byte of it through a registry that ignores ranges instead.
	px.ignoreRanges(func(body io.ReadCloser) io.ReadCloser { return &flipReader{ReadCloser: body, at: 600 << 10} })
	s := newTestStore(t, Options{})
	_, err := s.Pull(testContext(t), px.host()+"/resumebad:1", nil)
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("pull whose resumed rest was changed = %v, want ErrDigestMismatch", err)
	}
	assertNoImage(t, s)
	if blobExists(s, layer) {
		t.Fatal("the changed blob was kept")
	}
	if layers := dirNames(t, s.path(layersDir)); len(layers) != 0 {
		t.Fatalf("layers kept of a changed blob: %v", layers)
	}
}

// Layers unpack side by side: the top layer is in its layer dir while the
// base layer's download still waits. The chain mounts in order, whiteouts
// of a later layer hiding an earlier layer's files.
func TestPullSideBySideKeepsLayerOrder(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	base := tim.Layer(t,
		tim.File("a/old", "old\n", 0o644), tim.File("a/keep", "keep\n", 0o644),
		tim.File("x", "0\n", 0o644), tim.File("big", randomString(t, 256<<10), 0o644))
	mid := tim.Layer(t, tim.Whiteout("a/old"), tim.File("x", "1\n", 0o644), tim.File("y", "1\n", 0o644))
	top := tim.Layer(t, tim.File("x", "2\n", 0o644), tim.Whiteout("y"), tim.File("a/new", "new\n", 0o644))
	img := tim.Image(t, []v1.Layer{base, mid, top})
	p := push(t, reg, "order:1", img)
	px := startProxy(t, reg.Host())
	digests := layerDigests(t, img)
	release := make(chan struct{})
	held := holdLayer(px, digests[0], 64<<10, release)
	s := newTestStore(t, Options{})
	done := pullAsync(testContext(t), s, px.host()+"/order:1")
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	chains := chainIDs(cf.RootFS.DiffIDs)
	<-held.reached
	waitFor(t, "the top layer unpacked while the base layer's download waits", 20*time.Second,
		func() bool { return s.hasLayer(chains[2]) })
	if s.hasLayer(chains[0]) {
		t.Error("the base layer is in before its download ended")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("pull: %v", err)
	}
	if err := s.PrepareRootfs("ctr", p.configID); err != nil {
		t.Fatal(err)
	}
	root, err := s.MountRootfs("ctr")
	if err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]string{"a/keep": "keep\n", "a/new": "new\n", "x": "2\n"} {
		if b, err := os.ReadFile(filepath.Join(root, rel)); err != nil || string(b) != want {
			t.Errorf("%s = %q (%v), want %q", rel, b, err, want)
		}
	}
	for _, gone := range []string{"a/old", "y"} {
		if _, err := os.Lstat(filepath.Join(root, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is visible (%v): a later layer's whiteout was not applied", gone, err)
		}
	}
	if err := s.UnmountRootfs("ctr"); err != nil {
		t.Fatal(err)
	}
}

// A pull cancelled while its layers stream leaves no temp file or dir, no
// image and no layer dir of a layer it had not finished.
func TestPullCancelledMidLayerLeavesNothing(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	var entries []tim.Entry
	for _, name := range []string{"a", "b", "c", "d"} {
		entries = append(entries, tim.File("data/"+name, randomString(t, 64<<10), 0o644))
	}
	img := tim.Image(t, []v1.Layer{tim.Layer(t, entries...), tim.Layer(t, tim.File("small", "s\n", 0o644))})
	push(t, reg, "cancel:1", img)
	px := startProxy(t, reg.Host())
	digests := layerDigests(t, img)
	never := make(chan struct{})
	t.Cleanup(func() { close(never) })
	held := holdLayer(px, digests[0], 160<<10, never)
	s := newTestStore(t, Options{})
	ctx, cancel := context.WithCancel(testContext(t))
	done := pullAsync(ctx, s, px.host()+"/cancel:1")
	<-held.reached
	waitFor(t, "the held layer's unpack under way", 20*time.Second, func() bool { return tmpLayerFiles(s) >= 1 })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled pull = %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the pull did not end within 20 s of its cancel")
	}
	assertNoImage(t, s)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	chains := chainIDs(cf.RootFS.DiffIDs)
	if s.hasLayer(chains[0]) || blobExists(s, digests[0]) {
		t.Fatal("the cancelled layer was kept")
	}
	for _, name := range dirNames(t, s.path(layersDir)) {
		if name != chains[1].Hex && name != chains[1].String() {
			t.Errorf("layer dir %s left by a cancelled pull", name)
		}
	}
}

// A layer gives its unpack slot back before it waits for the disk to sync
// its files: the slots bound the CPU work of unpacking, and while one
// layer syncs, another's unpack keeps the CPU busy. Both ways of unpacking
// are checked: streamed from the download, and from a blob already kept.
func TestLayerSyncHoldsNoUnpackSlot(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := push(t, reg, "sync:1", incompressible(t, 64<<10))
	var (
		s    *Store
		mu   sync.Mutex
		held []int
	)
	s = newTestStore(t, Options{Hooks: Hooks{SyncLayer: func(dir string) error {
		mu.Lock()
		held = append(held, runtime.NumCPU()-s.unpackSlots.freeNow())
		mu.Unlock()
		return syncFS(dir)
	}}})
	img, err := s.Pull(testContext(t), p.ref, nil)
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	if err := os.RemoveAll(s.layerDir(img.Layers[0].ChainID)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pull(testContext(t), p.ref, nil); err != nil {
		t.Fatalf("pull with the blob kept and the layer gone: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(held) != 2 || held[0] != 0 || held[1] != 0 {
		t.Fatalf("unpack slots held while a layer synced (streamed, from the blob): %v, want [0 0]", held)
	}
}
