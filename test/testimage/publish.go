package testimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Push pushes img to ref ("127.0.0.1:PORT/name:tag") and returns the manifest
// digest ("sha256:…"). Pass remote.WithAuth or remote.WithTransport for
// registries with auth or TLS.
func Push(t testing.TB, img v1.Image, ref string, opts ...remote.Option) string {
	t.Helper()
	r := parseRef(t, ref)
	if err := remote.Write(r, img, opts...); err != nil {
		t.Fatalf("testimage: push %s: %v", ref, err)
	}
	return Digest(t, img)
}

// Index is a manifest list (OCI image index) of images by platform
// ("linux/amd64", "linux/arm64/v8").
func Index(t testing.TB, byPlatform map[string]v1.Image) v1.ImageIndex {
	t.Helper()
	var idx v1.ImageIndex = empty.Index
	for _, p := range sortedKeys(byPlatform) {
		platform, err := v1.ParsePlatform(p)
		if err != nil {
			t.Fatalf("testimage: platform %q: %v", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        byPlatform[p],
			Descriptor: v1.Descriptor{Platform: platform},
		})
	}
	return idx
}

// PushIndex pushes a manifest list and every image in it; it returns the
// digest of the list.
func PushIndex(t testing.TB, idx v1.ImageIndex, ref string, opts ...remote.Option) string {
	t.Helper()
	r := parseRef(t, ref)
	if err := remote.WriteIndex(r, idx, opts...); err != nil {
		t.Fatalf("testimage: push index %s: %v", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatalf("testimage: index digest: %v", err)
	}
	return d.String()
}

// WriteDockerSave writes images by reference ("busybox:latest") as a tar in
// the format of `docker save`: manifest.json, <config>.json, <layer>.tar.gz.
func WriteDockerSave(t testing.TB, path string, byRef map[string]v1.Image) {
	t.Helper()
	refs := map[name.Reference]v1.Image{}
	for ref, img := range byRef {
		refs[parseRef(t, ref)] = img
	}
	if err := tarball.MultiRefWriteToFile(path, refs); err != nil {
		t.Fatalf("testimage: write docker-save tar %s: %v", path, err)
	}
}

// WriteOCILayout writes images by reference as a tar of an OCI image layout:
// oci-layout, index.json (one entry per reference, named with the
// io.containerd.image.name and org.opencontainers.image.ref.name annotations),
// blobs/sha256/….
func WriteOCILayout(t testing.TB, path string, byRef map[string]v1.Image) {
	t.Helper()
	if err := writeOCILayout(path, byRef); err != nil {
		t.Fatalf("testimage: write OCI layout tar %s: %v", path, err)
	}
}

func writeOCILayout(path string, byRef map[string]v1.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	if err := writeTarFile(tw, "oci-layout", strings.NewReader(`{"imageLayoutVersion":"1.0.0"}`), 30); err != nil {
		return err
	}
	index := v1.IndexManifest{SchemaVersion: 2, MediaType: "application/vnd.oci.image.index.v1+json"}
	written := map[v1.Hash]bool{}
	for _, ref := range sortedKeys(byRef) {
		desc, err := writeImageBlobs(tw, byRef[ref], written)
		if err != nil {
			return fmt.Errorf("%s: %w", ref, err)
		}
		desc.Annotations = map[string]string{
			"io.containerd.image.name":          ref,
			"org.opencontainers.image.ref.name": ref,
		}
		index.Manifests = append(index.Manifests, desc)
	}
	raw, err := json.Marshal(index)
	if err != nil {
		return err
	}
	if err := writeTarFile(tw, "index.json", strings.NewReader(string(raw)), int64(len(raw))); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func writeImageBlobs(tw *tar.Writer, img v1.Image, written map[v1.Hash]bool) (v1.Descriptor, error) {
	manifest, err := img.RawManifest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return v1.Descriptor{}, err
	}
	layers, err := img.Layers()
	if err != nil {
		return v1.Descriptor{}, err
	}
	blobs := []func() (v1.Hash, int64, io.ReadCloser, error){
		rawBlob(manifest), rawBlob(config),
	}
	for _, l := range layers {
		blobs = append(blobs, layerBlob(l))
	}
	for _, blob := range blobs {
		h, size, rc, err := blob()
		if err != nil {
			return v1.Descriptor{}, err
		}
		if !written[h] {
			written[h] = true
			err = writeTarFile(tw, "blobs/"+h.Algorithm+"/"+h.Hex, rc, size)
		}
		rc.Close()
		if err != nil {
			return v1.Descriptor{}, err
		}
	}
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	h, size, _ := v1.SHA256(bytes.NewReader(manifest))
	return v1.Descriptor{MediaType: mt, Digest: h, Size: size}, nil
}

func rawBlob(b []byte) func() (v1.Hash, int64, io.ReadCloser, error) {
	return func() (v1.Hash, int64, io.ReadCloser, error) {
		h, size, err := v1.SHA256(bytes.NewReader(b))
		return h, size, io.NopCloser(bytes.NewReader(b)), err
	}
}

func layerBlob(l v1.Layer) func() (v1.Hash, int64, io.ReadCloser, error) {
	return func() (v1.Hash, int64, io.ReadCloser, error) {
		h, err := l.Digest()
		if err != nil {
			return h, 0, nil, err
		}
		size, err := l.Size()
		if err != nil {
			return h, 0, nil, err
		}
		rc, err := l.Compressed()
		return h, size, rc, err
	}
}

func writeTarFile(tw *tar.Writer, name string, r io.Reader, size int64) error {
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size, ModTime: Epoch}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := io.Copy(tw, r)
	return err
}

func parseRef(t testing.TB, ref string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatalf("testimage: reference %q: %v", ref, err)
	}
	return r
}

// Digest returns the manifest digest of img ("sha256:…").
func Digest(t testing.TB, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	return mustHash(t, "digest", d, err)
}

// ConfigDigest returns the config digest of img, the image ID a runtime reports.
func ConfigDigest(t testing.TB, img v1.Image) string {
	t.Helper()
	d, err := img.ConfigName()
	return mustHash(t, "config digest", d, err)
}

func mustHash(t testing.TB, what string, h v1.Hash, err error) string {
	t.Helper()
	if err != nil {
		t.Fatalf("testimage: %s: %v", what, err)
	}
	return h.String()
}
