// Command generate writes config/field_docs.go from the doc comments of
// config/config.go: go generate ./config runs it in config/.
//
//	generate config.go field_docs.go
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/minicri/minicri/config/internal/fielddocs"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: generate CONFIG.go FIELD_DOCS.go")
		os.Exit(2)
	}
	src, undocumented, err := fielddocs.Source(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
	if len(undocumented) > 0 {
		// The operator would see no comment on these keys.
		fmt.Fprintf(os.Stderr, "generate: config fields without a doc comment: %s\n", strings.Join(undocumented, ", "))
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[2], src, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
}
