package oci

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseFeatures(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want Features
	}{
		{"runc 1.1 without idmap", `{"mountOptions":["bind","ro","rro"],"linux":{"namespaces":["user"]}}`, Features{RecursiveReadOnly: true}},
		{"idmap enabled", `{"mountOptions":["rro"],"linux":{"mountExtensions":{"idmap":{"enabled":true}}}}`, Features{RecursiveReadOnly: true, IDMappedMounts: true}},
		{"idmap disabled", `{"mountOptions":["ro"],"linux":{"mountExtensions":{"idmap":{"enabled":false}}}}`, Features{}},
		{"empty", `{}`, Features{}},
		{"bind options", `{"mountOptions":["ro","noexec","nodev","nosuid"]}`, Features{BindOptions: true}},
		{"bind options without nodev", `{"mountOptions":["ro","noexec","nosuid"]}`, Features{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFeatures([]byte(tt.doc))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	if _, err := parseFeatures([]byte("not json")); err == nil {
		t.Error("parse of a non-JSON document succeeded")
	}
}

func TestFeaturesOfMissingBinary(t *testing.T) {
	r := &Runtime{Path: "/nonexistent/runc"}
	if f, err := r.Features(); err == nil || f != (Features{}) {
		t.Errorf("Features() = %+v, %v; want none and an error", f, err)
	}
}

// The features of a runtime binary are probed once per binary, not once
// per daemon start: a runtime that was probed before is not run again,
// until its file is another or the cache no longer parses.
func TestFeaturesKeptAcrossStarts(t *testing.T) {
	dir := t.TempDir()
	bin, runs, cache := filepath.Join(dir, "runc"), filepath.Join(dir, "runs"), filepath.Join(dir, "cache")
	fakeRunc := func(idmap string) {
		// A new file renamed over the old, as a package upgrade does.
		tmp := bin + ".new"
		writeFile(t, tmp, "#!/bin/sh\necho x >> "+runs+"\necho '{\"mountOptions\":[\"rro\"],\"linux\":{\"mountExtensions\":{\"idmap\":{\"enabled\":"+idmap+"}}}}'\n")
		if err := os.Chmod(tmp, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, bin); err != nil {
			t.Fatal(err)
		}
	}
	start := func() Features {
		t.Helper()
		f, err := (&Runtime{Path: bin, FeaturesCache: cache}).Features()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	probes := func() int {
		data, _ := os.ReadFile(runs)
		return strings.Count(string(data), "x")
	}

	fakeRunc("true")
	for i := 0; i < 3; i++ {
		if f := start(); !f.IDMappedMounts || !f.RecursiveReadOnly {
			t.Fatalf("start %d: features %+v, want rro and idmap", i, f)
		}
	}
	if n := probes(); n != 1 {
		t.Fatalf("3 starts ran the runtime %d times, want 1", n)
	}

	fakeRunc("false") // upgraded: another file at the same path
	if f := start(); f.IDMappedMounts {
		t.Fatalf("after the upgrade: features %+v, the old binary's", f)
	}
	if n := probes(); n != 2 {
		t.Fatalf("the upgraded binary was probed %d times in all, want 2", n)
	}

	files, _ := filepath.Glob(filepath.Join(cache, "*.json"))
	if len(files) != 1 {
		t.Fatalf("cache holds %v, want one file", files)
	}
	if err := os.WriteFile(files[0], []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if f := start(); f.IDMappedMounts || !f.RecursiveReadOnly {
		t.Fatalf("with a corrupt cache: features %+v", f)
	}
	if n := probes(); n != 3 {
		t.Fatalf("a corrupt cache was believed: %d probes in all, want 3", n)
	}
	if info, err := os.Stat(cache); err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("cache dir: %v, %v; want mode 0700", info, err)
	}
}

// A runtime whose features fail is not cached: the next start asks again.
func TestFailedFeaturesAreNotKept(t *testing.T) {
	dir := t.TempDir()
	bin, cache := filepath.Join(dir, "runc"), filepath.Join(dir, "cache")
	writeFile(t, bin, "#!/bin/sh\nexit 1\n")
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := (&Runtime{Path: bin, FeaturesCache: cache}).Features(); err == nil {
		t.Fatal("a failing features succeeded")
	}
	if files, _ := filepath.Glob(filepath.Join(cache, "*")); len(files) != 0 {
		t.Fatalf("a failed probe was kept: %v", files)
	}
}
