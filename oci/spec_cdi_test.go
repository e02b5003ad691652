package oci

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// writeCDISpec writes a CDI spec of vendor example.com, class test, into dir.
func writeCDISpec(t *testing.T, dir, file, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

const testCDISpec = `{
  "cdiVersion": "0.6.0",
  "kind": "example.com/test",
  "devices": [{
    "name": "null",
    "containerEdits": {
      "deviceNodes": [{"path": "/dev/mcdi-null", "hostPath": "/dev/null"}],
      "env": ["MCDI_DEVICE=null"],
      "mounts": [{"hostPath": "/tmp", "containerPath": "/mcdi", "options": ["bind", "ro"]}]
    }
  }],
  "containerEdits": {"env": ["MCDI_SPEC=1"]}
}`

func TestCDIResolveAndInject(t *testing.T) {
	dir := t.TempDir()
	r := NewCDI([]string{dir})
	if unresolved, _ := r.Resolve([]string{"example.com/test=null"}); !slices.Equal(unresolved, []string{"example.com/test=null"}) {
		t.Fatalf("unresolved = %v before any spec exists, want the device", unresolved)
	}
	// A spec written after the first look is seen at the next.
	writeCDISpec(t, dir, "test.json", testCDISpec)
	unresolved, specErrs := r.Resolve([]string{"example.com/test=null", "example.com/test=nope"})
	if !slices.Equal(unresolved, []string{"example.com/test=nope"}) || specErrs != nil {
		t.Fatalf("Resolve = %v, %v; want only example.com/test=nope unresolved and no spec errors", unresolved, specErrs)
	}

	s := mustGenerate(t, minimalSpec(t), testHost())
	if err := r.Inject(s, []string{"example.com/test=null"}); err != nil {
		t.Fatal(err)
	}
	var node *specs.LinuxDevice
	for i := range s.Linux.Devices {
		if s.Linux.Devices[i].Path == "/dev/mcdi-null" {
			node = &s.Linux.Devices[i]
		}
	}
	if node == nil || node.Type != "c" || node.Major != 1 || node.Minor != 3 {
		t.Errorf("device node = %+v, want /dev/mcdi-null as c 1:3", node)
	}
	last := s.Linux.Resources.Devices[len(s.Linux.Resources.Devices)-1]
	if !last.Allow || last.Major == nil || *last.Major != 1 || last.Minor == nil || *last.Minor != 3 {
		t.Errorf("last device rule = %+v, want an allow rule for c 1:3", last)
	}
	for _, env := range []string{"MCDI_DEVICE=null", "MCDI_SPEC=1"} {
		if !slices.Contains(s.Process.Env, env) {
			t.Errorf("env %v lacks %s", s.Process.Env, env)
		}
	}
	if !slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == "/mcdi" && m.Source == "/tmp" }) {
		t.Errorf("mounts %+v lack /mcdi", s.Mounts)
	}

	if err := r.Inject(s, []string{"example.com/test=nope"}); err == nil || !strings.Contains(err.Error(), "example.com/test=nope") {
		t.Errorf("Inject of an unknown device: %v, want an error naming it", err)
	}
}

func TestCDIBrokenSpecFailsOnlyItsDevices(t *testing.T) {
	dir := t.TempDir()
	writeCDISpec(t, dir, "test.json", testCDISpec)
	writeCDISpec(t, dir, "broken.json", `{"cdiVersion": "0.6.0", "kind": "example.com/broken", "devices": [`)
	unresolved, specErrs := NewCDI([]string{dir}).Resolve([]string{"example.com/test=null", "example.com/broken=x"})
	if !slices.Equal(unresolved, []string{"example.com/broken=x"}) {
		t.Errorf("unresolved = %v, want only the broken spec's device", unresolved)
	}
	if specErrs == nil || !strings.Contains(specErrs.Error(), "broken.json") {
		t.Errorf("spec errors = %v, want one naming broken.json", specErrs)
	}
}

func TestCDINoDirsResolvesNothing(t *testing.T) {
	unresolved, _ := NewCDI(nil).Resolve([]string{"example.com/test=null"})
	if len(unresolved) != 1 {
		t.Errorf("unresolved = %v with no spec dirs, want the device", unresolved)
	}
}
