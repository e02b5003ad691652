package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// modes reads the mode of every regular file of img's one layer, by name.
func modes(t *testing.T, entrypoint string, files ...string) map[string]int64 {
	t.Helper()
	img, err := image(entrypoint, files)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v: want one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]int64{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			got[h.Name] = h.Mode
		}
	}
}

// A setuid bit reaches the image only where the spec asks for it: a host
// file's own setuid bit is not carried (a host's setuid binary copied into
// an image would be one more way to root in every container of it).
func TestSetuidOnlyWhereTheSpecAsks(t *testing.T) {
	dir := t.TempDir()
	plain, suid := filepath.Join(dir, "plain"), filepath.Join(dir, "suid")
	for _, f := range []string{plain, suid} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(suid, 0o4755); err != nil {
		t.Fatal(err)
	}
	got := modes(t, ";nnp", plain+"=/usr/local/bin/nnp:6755", plain+"=/bin/plain", suid+"=/bin/hostsuid")
	want := map[string]int64{"usr/local/bin/nnp": 0o6755, "bin/plain": 0o755, "bin/hostsuid": 0o755}
	for name, mode := range want {
		if got[name] != mode {
			t.Errorf("%s: mode %#o, want %#o (all: %v)", name, got[name], mode, got)
		}
	}
}

func TestModeRefusedWhereItMeansNothing(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, files := range [][]string{
		{f + "=/f:rwx"},                 // not octal
		{f + "=/f:17777"},               // more than the mode bits
		{f + "=/f:0"},                   // no mode at all
		{dir + "=/d:4755"},              // a directory
		{f + "=/f:755", f + "=/f:4755"}, // one path, two modes
	} {
		if _, err := image("-", files); err == nil {
			t.Errorf("%v: no error", files)
		}
	}
}
