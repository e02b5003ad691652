package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/minicri/minicri/test/testimage"
)

func TestParseImageArgsTakesFlagsAnywhere(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "minicri.toml")
	if err := os.WriteFile(conf, []byte("root = \"/from/file\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		root     string
		args0    []string
		code     int
		parsedOK bool
	}{
		{"flags first", []string{"--config", conf, "--root", "/r", "a.tar"}, "/r", []string{"a.tar"}, 0, true},
		{"flags last", []string{"a.tar", "--root", "/r", "--config", conf}, "/r", []string{"a.tar"}, 0, true},
		{"flags between", []string{"x", "--config", conf, "y", "--root=/r", "out.tar"}, "/r", []string{"x", "y", "out.tar"}, 0, true},
		{"root from the file", []string{"--config", conf, "a.tar"}, "/from/file", []string{"a.tar"}, 0, true},
		{"after --", []string{"--config", conf, "--", "--root", "b.tar"}, "/from/file", []string{"--root", "b.tar"}, 0, true},
		{"unknown flag", []string{"--config", conf, "--no-such-flag", "a.tar"}, "", nil, 2, false},
		{"invalid value", []string{"--config", conf, "--root", "relative", "a.tar"}, "", nil, 1, false},
	} {
		var stderr bytes.Buffer
		cfg, positional, code, ok := parseImageArgs(tc.args, &stderr)
		if ok != tc.parsedOK || code != tc.code {
			t.Errorf("%s: ok=%v code=%d, want ok=%v code=%d (%s)", tc.name, ok, code, tc.parsedOK, tc.code, stderr.String())
			continue
		}
		if ok && (cfg.Root != tc.root || !slices.Equal(positional, tc.args0)) {
			t.Errorf("%s: root %q args %q, want %q %q", tc.name, cfg.Root, positional, tc.root, tc.args0)
		}
	}
}

func TestImageCommandUsageErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no subcommand", nil, 2, "Usage"},
		{"unknown subcommand", []string{"pull", "busybox"}, 2, `unknown command "pull"`},
		{"import without a file", []string{"import", "--root", missing}, 2, "wrong number of arguments"},
		{"export without a file", []string{"export", "--root", missing, "busybox"}, 2, "wrong number of arguments"},
		{"list of a root with no store", []string{"list", "--root", missing}, 1, "no image store at " + missing},
		{"import of a missing file", []string{"import", "--root", missing, filepath.Join(missing, "x.tar")}, 1, "no such file"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"image"}, tc.args...), &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and %q", tc.name, code, stderr.String(), tc.code, tc.want)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("a failed command made the root %s: %v", missing, err)
	}
}

// TestImageImportListExport runs the three subcommands on one root: what is
// imported is listed and exported under its normalised name.
func TestImageImportListExport(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("import unpacks layers with their owners: needs root")
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	img := testimage.Busybox(t)
	id := testimage.ConfigDigest(t, img)
	testimage.WriteDockerSave(t, filepath.Join(dir, "in.tar"), map[string]v1.Image{"busybox:1.36": img})
	flags := []string{"--root", root, "--config", filepath.Join(dir, "none.toml")}
	if err := os.WriteFile(flags[3], nil, 0o644); err != nil {
		t.Fatal(err)
	}

	steps := []struct {
		args []string
		want []string
	}{
		{[]string{"import", filepath.Join(dir, "in.tar")}, []string{id, "docker.io/library/busybox:1.36"}},
		{[]string{"list"}, []string{"IMAGE ID", id, "docker.io/library/busybox:1.36", "MiB"}},
		{[]string{"export", "busybox:1.36", id[:15], filepath.Join(dir, "out.tar")}, []string{id}},
	}
	for _, s := range steps {
		var stdout, stderr bytes.Buffer
		code := run(append(append([]string{"image"}, s.args...), flags...), &stdout, &stderr)
		if code != 0 {
			t.Fatalf("image %v: exit %d: %s", s.args, code, stderr.String())
		}
		for _, w := range s.want {
			if !strings.Contains(stdout.String(), w) {
				t.Errorf("image %v printed %q, want %q in it", s.args, stdout.String(), w)
			}
		}
		// Two names of one image print it once.
		if n := strings.Count(stdout.String(), id); n != 1 {
			t.Errorf("image %v printed the image %d times:\n%s", s.args, n, stdout.String())
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "out.tar")); err != nil || fi.Size() == 0 {
		t.Fatalf("exported archive: %v", err)
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := humanSize(n); got != want {
			t.Errorf("humanSize(%d) = %q, want %q", n, got, want)
		}
	}
}
