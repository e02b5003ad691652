//go:build e2e

package e2e

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metadata "github.com/checkpoint-restore/checkpointctl/lib"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// checkpointArchive is a container checkpoint archive as checkpointctl
// reads it: unpacked into Dir, its config.dump and spec.dump read by
// checkpointctl's own lib.
type checkpointArchive struct {
	Dir     string
	Entries map[string]*tar.Header
	Config  *metadata.ContainerConfig
	Spec    *specs.Spec
	Deleted []string
}

// readCheckpointArchive unpacks the archive at path (regular files and
// directories only, names kept within the dir) and reads its metadata,
// failing the test where checkpointctl would fail.
func readCheckpointArchive(t *testing.T, path string) *checkpointArchive {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("checkpoint archive: %v", err)
	}
	defer f.Close()
	a := &checkpointArchive{Dir: t.TempDir(), Entries: map[string]*tar.Header{}}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("checkpoint archive %s: %v", path, err)
		}
		name := filepath.Clean(hdr.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			t.Fatalf("checkpoint archive entry %q leaves the archive", hdr.Name)
		}
		a.Entries[strings.TrimSuffix(hdr.Name, "/")] = hdr
		target := filepath.Join(a.Dir, name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o700)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(target), 0o700); err == nil {
				var out *os.File
				if out, err = os.Create(target); err == nil {
					_, err = io.Copy(out, tr)
					out.Close()
				}
			}
		default:
			t.Fatalf("checkpoint archive entry %s: type %q, want files and directories", hdr.Name, hdr.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if a.Config, _, err = metadata.ReadContainerCheckpointConfigDump(a.Dir); err != nil {
		t.Fatalf("checkpointctl's lib: %v", err)
	}
	if a.Spec, _, err = metadata.ReadContainerCheckpointSpecDump(a.Dir); err != nil {
		t.Fatalf("checkpointctl's lib: %v", err)
	}
	if _, err := os.Stat(filepath.Join(a.Dir, metadata.DeletedFilesFile)); err == nil {
		if a.Deleted, _, err = metadata.ReadContainerCheckpointDeletedFiles(a.Dir); err != nil {
			t.Fatalf("checkpointctl's lib: %v", err)
		}
	}
	for _, name := range []string{metadata.CheckpointDirectory + "/inventory.img", metadata.RootFsDiffTar, metadata.DumpLogFile} {
		if _, ok := a.Entries[name]; !ok {
			t.Errorf("checkpoint archive lacks %s", name)
		}
	}
	pages := false
	for name := range a.Entries {
		pages = pages || strings.HasPrefix(name, metadata.CheckpointDirectory+"/"+metadata.PagesPrefix)
	}
	if !pages {
		t.Errorf("checkpoint archive has no CRIU page image (%s%s*)", metadata.CheckpointDirectory+"/", metadata.PagesPrefix)
	}
	return a
}

// rootfsDiffFiles lists the names in the archive's rootfs-diff.tar.
func (a *checkpointArchive) rootfsDiffFiles(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	eachTarEntry(t, filepath.Join(a.Dir, metadata.RootFsDiffTar), func(hdr *tar.Header, r io.Reader) error {
		body, _ := io.ReadAll(io.LimitReader(r, 4096))
		out[hdr.Name] = string(body)
		return nil
	})
	return out
}

// rootfsDiffSizes reads a rootfs-diff.tar whole and returns each entry's
// size as read back (a sparse entry's holes included).
func rootfsDiffSizes(t *testing.T, path string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	eachTarEntry(t, path, func(hdr *tar.Header, r io.Reader) error {
		n, err := io.Copy(io.Discard, r)
		out[hdr.Name] = n
		return err
	})
	return out
}

// eachTarEntry calls fn with every entry of the tar file at path.
func eachTarEntry(t *testing.T, path string, fn func(*tar.Header, io.Reader) error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if err := fn(hdr, tr); err != nil {
			t.Fatalf("%s entry %s: %v", path, hdr.Name, err)
		}
	}
}
