package testimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/gzip"
)

// DeepDirsTar writes an uncompressed tar of n empty directories whose paths
// are about pathLen bytes long: a chain of directories with 255-byte names
// (the longest a name may be), then n directories at its bottom, each a
// directory entry of its own. It is the layer that made an unpacker keep
// n × pathLen bytes when it remembered every directory it made: 60,000 of
// them under 4 KB paths are 330 MB of tar, 2 MB gzipped.
func DeepDirsTar(w io.Writer, n, pathLen int) error {
	tw := tar.NewWriter(w)
	dir := ""
	for len(dir)+256+16 <= pathLen {
		dir += fmt.Sprintf("%c%s/", 'a'+len(dir)/256%26, strings.Repeat("x", 254))
		if err := tw.WriteHeader(dirHeader(dir)); err != nil {
			return err
		}
	}
	pad := strings.Repeat("y", max(pathLen-len(dir)-16, 1))
	for i := range n {
		if err := tw.WriteHeader(dirHeader(fmt.Sprintf("%s%s%08d/", dir, pad, i))); err != nil {
			return err
		}
	}
	return tw.Close()
}

func dirHeader(name string) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: Epoch, Format: tar.FormatPAX}
}

// DeepDirsLayer is DeepDirsTar gzipped, as a layer.
func DeepDirsLayer(t testing.TB, n, pathLen int) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	if err := DeepDirsTar(zw, n, pathLen); err != nil {
		t.Fatalf("testimage: deep dirs tar: %v", err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	compressed := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(compressed)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}
