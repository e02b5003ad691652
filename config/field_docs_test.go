package config

import (
	"bytes"
	"os"
	"testing"

	"github.com/minicri/minicri/config/internal/fielddocs"
)

// field_docs.go says, word for word, what the doc comments of config.go's
// fields say: what an operator reads in `minicri config` and --help is what
// a developer reads beside the field. go generate ./config rewrites it.
func TestFieldDocsAreCurrent(t *testing.T) {
	want, undocumented, err := fielddocs.Source("config.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range undocumented {
		t.Errorf("config field %s has no doc comment: the operator would see no comment on its key", field)
	}
	got, err := os.ReadFile("field_docs.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("field_docs.go does not match the doc comments of config.go; run: go generate ./config")
	}
}
