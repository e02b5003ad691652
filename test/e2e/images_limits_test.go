//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// manyEntriesLayer is a zstd layer of n empty files, compressed once here
// (a million entries are 512 MB of tar, 4 MB compressed).
func manyEntriesLayer(t *testing.T, n int) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	if err := testimage.EmptyFilesTar(zw, n); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	compressed := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(compressed)), nil },
		tarball.WithMediaType(types.OCILayerZStd))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestPullRefusesImagesOverUnpackLimits pulls images whose layers declare
// far more than they carry: a 1 TiB sparse file, a path 10,000 directories
// deep, a million empty files (against a lowered limit). Each pull fails
// quickly with ResourceExhausted and a message naming the limit's key; no
// image, blob, layer or temp file stays, and an ordinary image still pulls.
func TestPullRefusesImagesOverUnpackLimits(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	d := StartDaemon(t, WithArgs("--image-max-unpacked-entries", "2000"))
	cases := []struct {
		name  string
		layer func(t *testing.T) v1.Layer
		key   string
	}{
		{"1 TiB sparse file", func(t *testing.T) v1.Layer {
			return testimage.SparseLayer(t, testimage.SparsePAX1, "var/log/lastlog", 1<<40, map[int64]string{0: "x", 1<<40 - 1: "y"})
		}, "image.max_unpacked_bytes"},
		{"10,000-deep path", func(t *testing.T) v1.Layer {
			return testimage.Layer(t, testimage.File(strings.Repeat("d/", 10_000)+"f", "deep\n", 0o644))
		}, "image.max_path_depth"},
		{"a million empty files", func(t *testing.T) v1.Layer { return manyEntriesLayer(t, 1_000_000) }, "image.max_unpacked_entries"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img := testimage.Image(t, []v1.Layer{testimage.BusyboxLayer(t), c.layer(t)})
			p := pushImage(t, reg, fmt.Sprintf("oversized%d:v1", i), img)
			start := time.Now()
			_, err := d.pullErr(p.ref, nil)
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), c.key) || !strings.Contains(err.Error(), p.ref) {
				t.Fatalf("pull = %v; want ResourceExhausted naming the image and %s", err, c.key)
			}
			if took := time.Since(start); took > 15*time.Second {
				t.Errorf("the refusal took %v", took)
			}
			if st := d.imageStatus(t, p.ref, false); st.GetImage() != nil {
				t.Fatalf("a refused image is listed: %v", st.GetImage())
			}
		})
	}
	imageRoot := filepath.Join(d.Root, "image")
	for _, dir := range []string{"blobs", "layers", "l", "tmp"} {
		if files := filesBelow(t, filepath.Join(imageRoot, dir)); len(files) != 0 {
			t.Errorf("refused images left %d files in %s: %.5v", len(files), dir, files)
		}
	}
	ok := pushImage(t, reg, "ordinary:v1", testimage.Busybox(t))
	if got := d.pull(t, ok.ref); got != ok.id {
		t.Fatalf("pull of an ordinary image after the refusals = %s, want %s", got, ok.id)
	}
}
