package testimage_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

func TestBusyboxIsDeterministic(t *testing.T) {
	a, b := testimage.Busybox(t), testimage.Busybox(t)
	if da, db := testimage.Digest(t, a), testimage.Digest(t, b); da != db {
		t.Fatalf("two builds differ: %s vs %s", da, db)
	}
	c := testimage.Busybox(t, testimage.WithCmd("true"))
	if testimage.ConfigDigest(t, a) == testimage.ConfigDigest(t, c) {
		t.Fatal("WithCmd did not change the config")
	}
}

func TestPushAndPullBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts registry.Options
	}{
		{"plain", registry.Options{}},
		{"tls+auth", registry.Options{TLS: true, Users: map[string]string{"u": "p"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := registry.Start(t, tc.opts)
			img := testimage.Busybox(t)
			ref := reg.Host() + "/busybox:latest"
			opts := []remote.Option{remote.WithTransport(reg.Transport())}
			if len(tc.opts.Users) > 0 {
				opts = append(opts, remote.WithAuth(&authn.Basic{Username: "u", Password: "p"}))
			}
			digest := testimage.Push(t, img, ref, opts...)
			got, err := remote.Image(mustRef(t, ref), opts...)
			if err != nil {
				t.Fatalf("pull back: %v", err)
			}
			if d, _ := got.Digest(); d.String() != digest {
				t.Fatalf("pulled digest %s, pushed %s", d, digest)
			}
			if !layerHas(t, got, "bin/sh") {
				t.Fatal("busybox layer has no bin/sh")
			}
		})
	}
}

func TestStopAndRestart(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	ref := reg.Host() + "/busybox:latest"
	testimage.Push(t, testimage.Busybox(t), ref)
	reg.Stop()
	if _, err := remote.Head(mustRef(t, ref)); err == nil {
		t.Fatal("a stopped registry still answers")
	}
	reg.Restart()
	if _, err := remote.Head(mustRef(t, ref)); err != nil {
		t.Fatalf("restarted registry lost the image: %v", err)
	}
}

func layerHas(t *testing.T, img v1.Image, path string) bool {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Name == path {
			return true
		}
	}
}

func mustRef(t *testing.T, ref string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestEmptyFilesTarReads checks the hand-made blocks with archive/tar.
func TestEmptyFilesTarReads(t *testing.T) {
	var buf bytes.Buffer
	if err := testimage.EmptyFilesTar(&buf, 2500); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	n := 0
	for ; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("entry %d: %v", n, err)
		}
		if want := fmt.Sprintf("d%03d/f%07d", n%1000, n); h.Name != want || h.Size != 0 || h.Typeflag != tar.TypeReg {
			t.Fatalf("entry %d: %q size %d type %c, want %q, an empty file", n, h.Name, h.Size, h.Typeflag, want)
		}
	}
	if n != 2500 {
		t.Fatalf("%d entries, want 2500", n)
	}
}
