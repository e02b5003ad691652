package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every page the systemd unit's Documentation= names is one make install
// installs (README.md and docs/*.md into PREFIX/share/doc/minicri), and
// exists in the tree. Before, it named a directory nothing installed.
func TestUnitDocumentationIsInstalled(t *testing.T) {
	const docDir = "/usr/local/share/doc/minicri/"
	unit, err := os.ReadFile("../../contrib/systemd/minicri.service")
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(makefile), "$(PREFIX)/share/doc/minicri/") || !strings.Contains(string(makefile), "README.md docs/*.md") {
		t.Fatal("make install does not install README.md and docs/*.md into $(PREFIX)/share/doc/minicri")
	}
	var pages []string
	for line := range strings.Lines(string(unit)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "Documentation="); ok {
			pages = append(pages, strings.Fields(rest)...)
		}
	}
	if len(pages) == 0 {
		t.Fatal("the unit has no Documentation=")
	}
	for _, p := range pages {
		name, ok := strings.CutPrefix(p, "file://"+docDir)
		if !ok || strings.Contains(name, "/") {
			t.Errorf("Documentation=%s is not a page make install puts in %s", p, docDir)
			continue
		}
		src := filepath.Join("../../docs", name)
		if name == "README.md" {
			src = "../../README.md"
		}
		if _, err := os.Stat(src); err != nil {
			t.Errorf("Documentation=%s: no %s in the tree to install: %v", p, src, err)
		}
	}
}
