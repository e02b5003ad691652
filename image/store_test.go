package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	tim "github.com/minicri/minicri/test/testimage"
)

func TestParseReferenceNormalises(t *testing.T) {
	const dg = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct{ in, want string }{
		{"busybox", "docker.io/library/busybox:latest"},
		{"busybox:1.36", "docker.io/library/busybox:1.36"},
		{"library/busybox", "docker.io/library/busybox:latest"},
		{"docker.io/busybox", "docker.io/library/busybox:latest"},
		{"index.docker.io/library/busybox:1", "docker.io/library/busybox:1"},
		{"user/app:v1", "docker.io/user/app:v1"},
		{"quay.io/org/app", "quay.io/org/app:latest"},
		{"127.0.0.1:5000/app:v1", "127.0.0.1:5000/app:v1"},
		{"localhost/app", "localhost/app:latest"},
		{"busybox@" + dg, "docker.io/library/busybox@" + dg},
		{"busybox:1.36@" + dg, "docker.io/library/busybox@" + dg},
	} {
		got, err := parseReference(tc.in)
		if err != nil || got.String() != tc.want {
			t.Errorf("parseReference(%q) = %q, %v; want %q", tc.in, got.String(), err, tc.want)
		}
	}
	for _, bad := range []string{"", "UPPER/case", "a b", "busybox@sha256:short", "busybox@md5:0123"} {
		if _, err := parseReference(bad); !errors.Is(err, ErrInvalidReference) {
			t.Errorf("parseReference(%q) = %v, want ErrInvalidReference", bad, err)
		}
	}
}

func TestResolvePrefersTagsAndRefusesAmbiguousPrefixes(t *testing.T) {
	images := []Image{
		{ID: "sha256:abc1" + strings.Repeat("0", 60), RepoTags: []string{"docker.io/library/abc:latest"}},
		{ID: "sha256:abc2" + strings.Repeat("0", 60)},
		{ID: "sha256:def0" + strings.Repeat("0", 60)},
	}
	for _, tc := range []struct {
		ref     string
		wantID  string
		wantErr error
	}{
		{"abc", images[0].ID, nil}, // the tag docker.io/library/abc:latest wins over the prefix
		{"abc2", images[1].ID, nil},
		{"sha256:def", images[2].ID, nil},
		{"ab", "", ErrNotFound}, // too short for a prefix, and no such tag
		{"abc0", "", ErrNotFound},
		{"sha256:abc", "", ErrAmbiguous},
	} {
		img, err := resolve(images, tc.ref)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("resolve(%q) = %v, want %v", tc.ref, err, tc.wantErr)
			}
			continue
		}
		if err != nil || img.ID != tc.wantID {
			t.Errorf("resolve(%q) = %v, %v; want %s", tc.ref, img, err, tc.wantID)
		}
	}
}

// importImages writes byRef as an OCI layout tar and imports it.
func importImages(t *testing.T, s *Store, byRef map[string]v1.Image) []Image {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "images.tar")
	tim.WriteOCILayout(t, archive, byRef)
	images, err := s.Import(testContext(t), archive)
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	return images
}

func TestRemoveInUseUnknownAndGC(t *testing.T) {
	requireRoot(t)
	s := newTestStore(t, Options{})
	if err := s.Remove("docker.io/library/nothing:here"); err != nil {
		t.Fatalf("remove of an unknown image: %v", err)
	}
	img := importImages(t, s, map[string]v1.Image{"example.com/app:1": tim.MultiLayer(t)})[0]
	before, err := s.FsInfo()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PrepareRootfs("c1", img.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("example.com/app:1"); !errors.Is(err, ErrInUse) {
		t.Fatalf("remove of an image in use = %v, want ErrInUse", err)
	}
	if _, err := s.Get(img.ID); err != nil {
		t.Fatalf("the image in use went away: %v", err)
	}
	if !blobExists(s, img.ManifestDigest) || !s.hasLayer(mustHash(t, img.Layers[1].ChainID)) {
		t.Fatal("content of the image in use went away")
	}

	if err := s.RemoveRootfs("c1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(img.ID); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := s.Get(img.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after remove = %v, want ErrNotFound", err)
	}
	for _, dir := range []string{blobsDir, layersDir, tmpDir, snapshotsDir} {
		if left := dirNames(t, s.path(dir)); len(left) != 0 {
			t.Errorf("%s after the last image went: %v", dir, left)
		}
	}
	after, err := s.FsInfo()
	if err != nil {
		t.Fatal(err)
	}
	if after.UsedBytes >= before.UsedBytes || after.InodesUsed >= before.InodesUsed {
		t.Errorf("FsInfo did not shrink: before %+v, after %+v", before, after)
	}
}

func TestSharedLayersSurviveRemovalOfOneImage(t *testing.T) {
	s := newTestStore(t, Options{})
	imgs := importImages(t, s, map[string]v1.Image{
		"example.com/base:1":  tim.Busybox(t),
		"example.com/multi:1": tim.MultiLayer(t),
		"example.com/other:1": tim.Busybox(t, tim.WithCmd("other")),
	})
	byTag := map[string]Image{}
	for _, img := range imgs {
		byTag[img.RepoTags[0]] = img
	}
	base, other := byTag["example.com/base:1"], byTag["example.com/other:1"]
	if base.Layers[0].ChainID != other.Layers[0].ChainID {
		t.Fatalf("two images of one layer do not share it: %s vs %s", base.Layers[0].ChainID, other.Layers[0].ChainID)
	}
	if err := s.Remove("example.com/base:1"); err != nil {
		t.Fatal(err)
	}
	if !s.hasLayer(mustHash(t, other.Layers[0].ChainID)) || !blobExists(s, other.Layers[0].Digest) {
		t.Fatal("a layer another image uses was collected")
	}
	if blobExists(s, base.ID) {
		t.Fatal("the removed image's config was not collected")
	}
}

func TestFsInfo(t *testing.T) {
	s := newTestStore(t, Options{})
	empty, err := s.FsInfo()
	if err != nil {
		t.Fatal(err)
	}
	if empty.Mountpoint == "" || !strings.HasPrefix(s.Root(), strings.TrimSuffix(empty.Mountpoint, "/")) {
		t.Errorf("mountpoint %q does not hold %s", empty.Mountpoint, s.Root())
	}
	importImages(t, s, map[string]v1.Image{"example.com/app:1": tim.Busybox(t)})
	full, err := s.FsInfo()
	if err != nil {
		t.Fatal(err)
	}
	// The busybox layer holds a 2 MB binary, stored compressed and unpacked.
	if full.UsedBytes < empty.UsedBytes+1<<20 || full.InodesUsed <= empty.InodesUsed+len64(tim.Applets)/2 {
		t.Errorf("FsInfo after import %+v, before %+v: want it to grow by the image", full, empty)
	}
	if err := s.Remove("example.com/app:1"); err != nil {
		t.Fatal(err)
	}
	gone, err := s.FsInfo()
	if err != nil {
		t.Fatal(err)
	}
	// Back to the empty store's usage, plus images.json, generation and
	// the kept measure (usageName).
	if gone.UsedBytes > empty.UsedBytes+12288 || gone.InodesUsed > empty.InodesUsed+3 {
		t.Errorf("FsInfo after removal %+v, want it back to about %+v", gone, empty)
	}
}

func len64[T any](s []T) uint64 { return uint64(len(s)) }

// What is written below the store between two pulls (the containers'
// writable layers) never makes a caller wait for a walk: a measure older
// than usageTTL is answered, and a new one taken in the background. A
// restarted daemon's first call answers the last daemon's measure.
func TestFsInfoWalksOutsideTheCall(t *testing.T) {
	clock := newStoppedClock()
	root := t.TempDir()
	s := newTestStore(t, Options{Root: root, Hooks: Hooks{Now: clock.now}})
	first, err := s.FsInfo()
	if err != nil {
		t.Fatal(err)
	}
	// A pod's writes: 64 files of 64 KiB in a writable layer.
	// (Not in snapshots/, where the new store's collection would take it
	// for a half-made rootfs.)
	upper := filepath.Join(root, "pod-writes")
	if err := os.MkdirAll(upper, 0o700); err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		if err := os.WriteFile(filepath.Join(upper, fmt.Sprint(i)), make([]byte, 64<<10), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A restart: the new store answers the kept measure without a walk.
	restarted := newTestStore(t, Options{Root: root, Hooks: Hooks{Now: clock.now}})
	if got, err := restarted.FsInfo(); err != nil || got != first {
		t.Fatalf("restarted FsInfo = %+v, %v; want the kept measure %+v", got, err, first)
	}
	// Stale: the call answers at once, the walk after it sees the writes.
	clock.advance(usageTTL)
	if got, err := restarted.FsInfo(); err != nil || got != first {
		t.Fatalf("stale FsInfo = %+v, %v; want the last measure %+v", got, err, first)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := restarted.FsInfo()
		if err != nil {
			t.Fatal(err)
		}
		if got.UsedBytes >= first.UsedBytes+64*64<<10 && got.InodesUsed >= first.InodesUsed+65 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("FsInfo %+v 10 s after the writes, before them %+v: the background walk never came", got, first)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A file's links are one inode, counted once.
	before := restarted.measureLocked(t)
	for i := range 8 {
		if err := os.Link(filepath.Join(upper, "0"), filepath.Join(upper, fmt.Sprint("link", i))); err != nil {
			t.Fatal(err)
		}
	}
	if after := restarted.measureLocked(t); after.InodesUsed != before.InodesUsed || after.UsedBytes != before.UsedBytes {
		t.Errorf("8 more links to a file: %+v, before them %+v; want the same", after, before)
	}
}

// measureLocked walks the store as FsInfo does after a pull.
func (s *Store) measureLocked(t *testing.T) FsUsage {
	t.Helper()
	s.measureMu.Lock()
	defer s.measureMu.Unlock()
	u, err := s.measureUsage(0)
	if err != nil {
		t.Fatal(err)
	}
	return u.Usage
}

// TestTwoStoresOneRoot is the daemon and `minicri image import` on one
// root: each sees what the other did, without a restart.
func TestTwoStoresOneRoot(t *testing.T) {
	root := t.TempDir()
	daemon := newTestStore(t, Options{Root: root})
	cli := newTestStore(t, Options{Root: root})
	if len(daemon.List()) != 0 {
		t.Fatal("new store not empty")
	}
	img := importImages(t, cli, map[string]v1.Image{"example.com/app:1": tim.Busybox(t)})[0]
	got, err := daemon.Get("example.com/app:1")
	if err != nil || got.ID != img.ID {
		t.Fatalf("daemon store Get after the other imported: %v, %v", got.ID, err)
	}
	if err := daemon.Remove(img.ID); err != nil {
		t.Fatal(err)
	}
	if list := cli.List(); len(list) != 0 {
		t.Fatalf("the other store still lists %d images", len(list))
	}

	// Concurrent imports from both stores of different images: both land.
	var wg sync.WaitGroup
	for i, s := range []*Store{daemon, cli} {
		wg.Go(func() {
			importImages(t, s, map[string]v1.Image{
				"example.com/app:" + string(rune('a'+i)): tim.Busybox(t, tim.WithCmd(string(rune('a'+i)))),
			})
		})
	}
	wg.Wait()
	for _, s := range []*Store{daemon, cli} {
		if n := len(s.List()); n != 2 {
			t.Errorf("a store lists %d images after two concurrent imports, want 2", n)
		}
	}
}

// TestNewRepairsLeftovers fakes what a killed daemon leaves: temp files, a
// blob and a layer no image refers to, a rootfs dir without a record.
func TestNewRepairsLeftovers(t *testing.T) {
	root := t.TempDir()
	s := newTestStore(t, Options{Root: root})
	img := importImages(t, s, map[string]v1.Image{"example.com/app:1": tim.Busybox(t)})[0]
	orphanBlob := strings.Repeat("ab", 32)
	orphanLayer := strings.Repeat("cd", 32)
	for _, p := range []string{
		filepath.Join(root, tmpDir, "blob-123"),
		filepath.Join(root, blobsDir, orphanBlob),
		filepath.Join(root, layersDir, orphanLayer, "file"),
		filepath.Join(root, snapshotsDir, "halfmade", "upper", "file"),
		filepath.Join(root, ".images.json.tmp-42"),
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A writer that died between images.json and the generation file.
	if err := os.WriteFile(filepath.Join(root, generationName), []byte("0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s2 := newTestStore(t, Options{Root: root})
	if gen, _ := readCounter(filepath.Join(root, generationName)); gen == 0 {
		t.Error("New did not repair the generation file")
	}
	for _, p := range []string{
		filepath.Join(root, tmpDir, "blob-123"),
		filepath.Join(root, blobsDir, orphanBlob),
		filepath.Join(root, layersDir, orphanLayer),
		filepath.Join(root, snapshotsDir, "halfmade"),
		filepath.Join(root, ".images.json.tmp-42"),
	} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("leftover %s survived New (%v)", p, err)
		}
	}
	if got, err := s2.Get(img.ID); err != nil || !blobExists(s2, got.Layers[0].Digest) || !s2.hasLayer(mustHash(t, got.Layers[0].ChainID)) {
		t.Fatalf("the image lost content in the repair: %v", err)
	}
}

// TestOpenLeavesTheCollectionToCollectGarbage: Open (the daemon's start)
// repairs no content, and CollectGarbage, run after it, does what New does.
func TestOpenLeavesTheCollectionToCollectGarbage(t *testing.T) {
	root := t.TempDir()
	s := newTestStore(t, Options{Root: root})
	img := importImages(t, s, map[string]v1.Image{"example.com/app:1": tim.Busybox(t)})[0]
	leftovers := []string{
		filepath.Join(root, blobsDir, strings.Repeat("ab", 32)),
		filepath.Join(root, snapshotsDir, "halfmade", "upper", "file"),
	}
	for _, p := range leftovers {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := Open(Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range leftovers {
		if _, err := os.Lstat(p); err != nil {
			t.Fatalf("Open collected %s already (%v): the daemon's start would wait for the collection", p, err)
		}
	}
	if err := s2.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	for _, p := range leftovers {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("leftover %s survived CollectGarbage (%v)", p, err)
		}
	}
	if got, err := s2.Get(img.ID); err != nil || !blobExists(s2, got.Layers[0].Digest) {
		t.Fatalf("the image lost content in the collection: %v", err)
	}
}

func TestImportExportRoundTrip(t *testing.T) {
	multi, bb := tim.MultiLayer(t), tim.Busybox(t, tim.OCI())
	byRef := map[string]v1.Image{"example.com/multi:1": multi, "busybox:latest": bb}
	want := map[string]string{ // tag → ID
		"example.com/multi:1":              tim.ConfigDigest(t, multi),
		"docker.io/library/busybox:latest": tim.ConfigDigest(t, bb),
	}
	dir := t.TempDir()
	ociTar, saveTar := filepath.Join(dir, "oci.tar"), filepath.Join(dir, "save.tar")
	tim.WriteOCILayout(t, ociTar, byRef)
	tim.WriteDockerSave(t, saveTar, byRef)

	for _, archive := range []string{ociTar, saveTar} {
		t.Run(filepath.Base(archive), func(t *testing.T) {
			s := newTestStore(t, Options{})
			imgs, err := s.Import(testContext(t), archive)
			if err != nil {
				t.Fatalf("import: %v", err)
			}
			checkTags(t, s, want)
			if len(imgs) != 2 {
				t.Fatalf("import returned %d images, want 2", len(imgs))
			}

			// Export both, import the export into a fresh store: same images,
			// same names, same repo digests.
			exported := filepath.Join(t.TempDir(), "export.tar")
			if err := s.Export(testContext(t), []string{"example.com/multi:1", "busybox"}, exported); err != nil {
				t.Fatalf("export: %v", err)
			}
			again := newTestStore(t, Options{})
			if _, err := again.Import(testContext(t), exported); err != nil {
				t.Fatalf("re-import: %v", err)
			}
			checkTags(t, again, want)
			for tag := range want {
				a, _ := s.Get(tag)
				b, _ := again.Get(tag)
				if a.ManifestDigest != b.ManifestDigest || !slices.Equal(a.RepoDigests, b.RepoDigests) && len(a.RepoDigests) > 0 {
					t.Errorf("%s: manifest %s → %s, digests %v → %v", tag, a.ManifestDigest, b.ManifestDigest, a.RepoDigests, b.RepoDigests)
				}
			}

			// The same export read as a docker-save archive (no index.json).
			saveOnly := filepath.Join(t.TempDir(), "save-only.tar")
			copyTarWithout(t, exported, saveOnly, "index.json")
			third := newTestStore(t, Options{})
			if _, err := third.Import(testContext(t), saveOnly); err != nil {
				t.Fatalf("import of the export's manifest.json: %v", err)
			}
			checkTags(t, third, want)
		})
	}
}

func checkTags(t *testing.T, s *Store, want map[string]string) {
	t.Helper()
	for tag, id := range want {
		img, err := s.Get(tag)
		if err != nil || img.ID != id {
			t.Errorf("Get(%s) = %s, %v; want %s", tag, img.ID, err, id)
		}
	}
	if n := len(s.List()); n != len(want) {
		t.Errorf("List has %d images, want %d", n, len(want))
	}
}

func copyTarWithout(t *testing.T, src, dst, drop string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tr, tw := tar.NewReader(in), tar.NewWriter(out)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Name == drop {
			continue
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestImportRefusesGarbage(t *testing.T) {
	s := newTestStore(t, Options{})
	dir := t.TempDir()
	notArchive := filepath.Join(dir, "x.tar")
	copyTarWithout(t, writeEmptyTar(t, dir), notArchive, "")
	if _, err := s.Import(testContext(t), notArchive); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Fatalf("import of an empty tar: %v", err)
	}
	assertNoImage(t, s)
}

func writeEmptyTar(t *testing.T, dir string) string {
	p := filepath.Join(dir, "empty.tar")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	tar.NewWriter(f).Close()
	f.Close()
	return p
}
