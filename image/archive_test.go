package image

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	tim "github.com/minicri/minicri/test/testimage"
)

// TestImportRefusesArchivesOfTooManyNames imports an archive of one more
// file than the index keeps: it is refused while it is indexed, before the
// index grows with it.
func TestImportRefusesArchivesOfTooManyNames(t *testing.T) {
	p := filepath.Join(t.TempDir(), "many.tar")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := tim.EmptyFilesTar(f, maxArchiveEntries+1); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	s := newTestStore(t, Options{})
	if _, err := s.Import(testContext(t), p); err == nil || !strings.Contains(err.Error(), "not an image archive") {
		t.Fatalf("import of %d files = %v, want a refusal", maxArchiveEntries+1, err)
	}
	assertNoImage(t, s)
}
