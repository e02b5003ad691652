package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/test/registry"
	tim "github.com/minicri/minicri/test/testimage"
)

var sparseFormats = []tim.SparseFormat{tim.SparsePAX1, tim.SparsePAX01, tim.SparseGNU}

// diskBytes is what a file takes on disk (its allocated blocks).
func diskBytes(t *testing.T, p string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// readAt reads len(want) bytes of p at off and compares them.
func checkAt(t *testing.T, f *os.File, off int64, want string) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, off); err != nil {
		t.Fatalf("read %s at %d: %v", f.Name(), off, err)
	}
	if string(got) != want {
		t.Fatalf("%s at %d = %q, want %q", f.Name(), off, got, want)
	}
}

// TestUnpackSparseFileTakesNoDisk unpacks a 256 MiB sparse file with three
// small pieces of data, in each sparse format: the file reads as it should,
// and its holes are holes, not blocks of zeros.
func TestUnpackSparseFileTakesNoDisk(t *testing.T) {
	requireRoot(t)
	const size = 256 << 20
	data := map[int64]string{0: "head", 100 << 20: "middle", size - 4: "tail"}
	for _, format := range sparseFormats {
		t.Run(format.String(), func(t *testing.T) {
			dest := t.TempDir()
			blob := writeBlobFile(t, gzipped(t, tim.SparseTar(format, "var/log/lastlog", size, data)))
			if _, err := unpackLayerFile(t.Context(), blob, dest, newBudget(Limits{})); err != nil {
				t.Fatalf("unpack: %v", err)
			}
			p := filepath.Join(dest, "var/log/lastlog")
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fi, _ := f.Stat()
			if fi.Size() != size {
				t.Fatalf("size %d, want %d", fi.Size(), size)
			}
			for off, want := range data {
				checkAt(t, f, off, want)
			}
			checkAt(t, f, 50<<20, "\x00\x00\x00\x00")
			if used := diskBytes(t, p); used > 1<<20 {
				t.Fatalf("a %d MiB sparse file with 14 bytes of data takes %d KiB of disk", size>>20, used>>10)
			}
		})
	}
}

// TestUnpackZeroRunsBecomeHoles: zeros stored as data (what moby writes
// for a sparse file) are not written either, and the file is unchanged,
// a trailing run included.
func TestUnpackZeroRunsBecomeHoles(t *testing.T) {
	requireRoot(t)
	var content bytes.Buffer
	content.WriteString(strings.Repeat("x", 5000))
	content.Write(make([]byte, 16<<20))
	content.WriteString("y")
	content.Write(make([]byte, 1<<20))
	dest := t.TempDir()
	blob := writeBlobFile(t, gzipped(t, tarOf(t, tim.File("zeros", content.String(), 0o644), tim.File("allzero", string(make([]byte, 10)), 0o644))))
	if _, err := unpackLayerFile(t.Context(), blob, dest, newBudget(Limits{})); err != nil {
		t.Fatalf("unpack: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(dest, "zeros"))
	if err != nil || !bytes.Equal(got, content.Bytes()) {
		t.Fatalf("unpacked file differs from the layer's (%d bytes read, want %d; %v)", len(got), content.Len(), err)
	}
	if used := diskBytes(t, filepath.Join(dest, "zeros")); used > 1<<20 {
		t.Fatalf("a 17 MiB file of zeros and 5001 bytes of data takes %d KiB of disk", used>>10)
	}
	if got, err := os.ReadFile(filepath.Join(dest, "allzero")); err != nil || !bytes.Equal(got, make([]byte, 10)) {
		t.Fatalf("a small file of zeros reads %q (%v)", got, err)
	}
}

// deepPath is a path of depth directories and a file.
func deepPath(depth int) string { return strings.Repeat("d/", depth) + "f" }

// TestUnpackRefusesLayersOverLimits unpacks layers that declare too much
// and checks each is refused quickly, naming the configuration key, before
// writing what it declared.
func TestUnpackRefusesLayersOverLimits(t *testing.T) {
	requireRoot(t)
	type tc struct {
		name   string
		layer  []byte
		limits Limits
		key    string
	}
	var cases []tc
	for _, format := range sparseFormats {
		cases = append(cases, tc{"1 TiB sparse file, " + format.String(),
			tim.SparseTar(format, "big", 1<<40, map[int64]string{0: "a", 1<<40 - 1: "z"}), Limits{}, "image.max_unpacked_bytes"})
	}
	cases = append(cases,
		tc{"files adding up", tarOf(t, tim.File("a", strings.Repeat("a", 600<<10), 0o644), tim.File("b", strings.Repeat("b", 600<<10), 0o644)),
			Limits{MaxUnpackedBytes: 1 << 20}, "image.max_unpacked_bytes"},
		tc{"10,000-deep path", tarOf(t, tim.File(deepPath(10_000), "x", 0o644)), Limits{}, "image.max_path_depth"},
		tc{"one over the depth", tarOf(t, tim.File(deepPath(DefaultMaxPathDepth), "x", 0o644)), Limits{}, "image.max_path_depth"},
		tc{"implicit parents count as entries", tarOf(t, tim.File(deepPath(200), "x", 0o644)), Limits{MaxUnpackedEntries: 100}, "image.max_unpacked_entries"},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			dest := t.TempDir()
			start := time.Now()
			_, err := unpackLayerFile(ctx, writeBlobFile(t, gzipped(t, c.layer)), dest, newBudget(c.limits))
			var le *LimitError
			if !errors.Is(err, ErrTooLarge) || !errors.As(err, &le) || le.Key != c.key || !strings.Contains(err.Error(), c.key) {
				t.Fatalf("unpack = %v; want a refusal naming %s", err, c.key)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("refusal took %v", took)
			}
			if len(err.Error()) > 1000 {
				t.Errorf("error of %d bytes: a long name is not shortened", len(err.Error()))
			}
			if _, err := os.Lstat(filepath.Join(dest, "big")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the refused file was created (lstat: %v)", err)
			}
		})
	}
	t.Run("at the depth limit", func(t *testing.T) {
		dest := t.TempDir()
		blob := writeBlobFile(t, tarOf(t, tim.File(deepPath(DefaultMaxPathDepth-1), "x", 0o644)))
		if _, err := unpackLayerFile(t.Context(), blob, dest, newBudget(Limits{})); err != nil {
			t.Fatalf("a path of %d components: %v", DefaultMaxPathDepth, err)
		}
	})
}

// TestUnpackMillionEntriesStopsAtTheLimit streams a layer of a million
// empty files (512 MB of tar, generated as it is read) and checks that the
// unpack stops at the limit, promptly, without reading the rest.
func TestUnpackMillionEntriesStopsAtTheLimit(t *testing.T) {
	requireRoot(t)
	const entries, limit = 1_000_000, 1_000
	pr, pw := io.Pipe()
	read := &countingReader{r: pr}
	go func() { pw.CloseWithError(tim.EmptyFilesTar(pw, entries)) }()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err := extractTar(ctx, read, t.TempDir(), newBudget(Limits{MaxUnpackedEntries: limit}))
	pr.CloseWithError(errors.New("unpack ended"))
	var le *LimitError
	if !errors.As(err, &le) || le.Key != "image.max_unpacked_entries" {
		t.Fatalf("unpack = %v; want a refusal naming image.max_unpacked_entries", err)
	}
	if n := read.n / 512; n > 2*limit+1024 {
		t.Errorf("%d blocks were read for a limit of %d entries", n, limit)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("refusal took %v", took)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestPullOverLimitLeavesNothing pulls an image whose second layer has too
// many entries: the pull fails naming the key, and neither the image, nor
// its blobs, nor the first layer (unpacked before the limit was hit) stay.
func TestPullOverLimitLeavesNothing(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	var many []tim.Entry
	for i := range 200 {
		many = append(many, tim.File(fmt.Sprintf("many/f%d", i), "", 0o644))
	}
	small := tim.Layer(t, tim.File("etc/hostname", "small\n", 0o644))
	img := tim.Image(t, []v1.Layer{small, tim.Layer(t, many...)})
	p := push(t, reg, "limits/many:v1", img)
	s := newTestStore(t, Options{Limits: Limits{MaxUnpackedEntries: 100}})

	_, err := s.Pull(testContext(t), p.ref, nil)
	var le *LimitError
	if !errors.As(err, &le) || le.Key != "image.max_unpacked_entries" || !strings.Contains(err.Error(), p.ref) {
		t.Fatalf("pull = %v; want a refusal naming the image and image.max_unpacked_entries", err)
	}
	assertNoImage(t, s)
	for _, dir := range []string{blobsDir, layersDir, linksDir} {
		if left := dirNames(t, s.path(dir)); len(left) != 0 {
			t.Errorf("%s left after a refused pull: %v", dir, left)
		}
	}
	// Under the limit, the same store pulls it.
	s2 := newTestStore(t, Options{Root: s.Root(), Limits: Limits{MaxUnpackedEntries: 1000}})
	if _, err := s2.Pull(testContext(t), p.ref, nil); err != nil {
		t.Fatalf("pull under the limit: %v", err)
	}
}
