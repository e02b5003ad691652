package oci

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/minicri/minicri/internal/atomicfile"
)

// SpecFile is the name of the spec in a bundle directory.
const SpecFile = "config.json"

// WriteSpec writes s as bundleDir/config.json atomically: a crash leaves the
// old file or the new one, never a torn one. Not durable (no fsync): a
// bundle is in the run dir, whose containers a reboot ends with it.
func WriteSpec(bundleDir string, s *specs.Spec) error {
	data, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode spec: %w", err)
	}
	return atomicfile.Replace(filepath.Join(bundleDir, SpecFile), data, 0o600)
}

// ReadSpec reads a bundle's config.json, e.g. to build an exec's process from it.
func ReadSpec(bundleDir string) (*specs.Spec, error) {
	data, err := os.ReadFile(filepath.Join(bundleDir, SpecFile))
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("decode spec %s: %w", filepath.Join(bundleDir, SpecFile), err)
	}
	return &s, nil
}
