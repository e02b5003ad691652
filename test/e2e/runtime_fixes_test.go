//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Debian's runc 1.1.5 (handler runc) lacks the fixes of CVE-2025-31133,
// CVE-2025-52565 and CVE-2025-52881 (runc 1.2.8, 1.3.3, 1.4.0-rc.3). Status
// says so in its info, as crictl info shows it, and the start-up log warns;
// the default handler is the current runc that make deps built, which has
// them. Before, nothing said so.
func TestStatusNamesRuncLackingSecurityFixes(t *testing.T) {
	requireCurrentRunc(t)
	d := StartDaemon(t)
	resp, err := d.Runtime.Status(context.Background(), true)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	raw := resp.GetInfo()["runtimeHandlerInfo"]
	var info map[string]struct {
		RuncVersion  string   `json:"runcVersion"`
		MissingFixes []string `json:"missingSecurityFixes"`
		FixedIn      string   `json:"fixedIn"`
	}
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		t.Fatalf("runtimeHandlerInfo %q: %v", raw, err)
	}
	t.Logf("runtimeHandlerInfo: %s", raw)
	want := []string{"CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881"}
	if got := info["runc"]; !strings.HasPrefix(got.RuncVersion, "1.1.5") || !slices.Equal(got.MissingFixes, want) || got.FixedIn == "" {
		t.Errorf("Status info of handler runc = %+v; want runc 1.1.5 lacking %v", got, want)
	}
	if got := info[usernsHandler]; got.RuncVersion == "" || len(got.MissingFixes) != 0 {
		t.Errorf("Status info of handler %s = %+v; want its version and no missing fixes", usernsHandler, got)
	}
	if got := resp.GetInfo()["defaultRuntimeHandler"]; got != `"`+usernsHandler+`"` {
		t.Errorf("defaultRuntimeHandler = %s, want %q, the runc with the fixes", got, usernsHandler)
	}
	var warned bool
	for _, line := range strings.Split(d.Output(), "\n") {
		if strings.Contains(line, "lacks security fixes") {
			if !strings.Contains(line, "handler=runc ") || !strings.Contains(line, "CVE-2025-31133") {
				t.Errorf("the warning names another handler or no CVE: %s", line)
			}
			warned = true
		}
	}
	if !warned {
		t.Errorf("the start-up log does not warn of handler runc's missing fixes:\n%s", d.Output())
	}
}

// On a node whose only runc is Debian 11's (1.0.0~rc93: no `features`, it
// exits 3; none of the fixes), the operator hears it: Status has a false
// RuncHasSecurityFixes condition naming the version and the CVEs, the
// start-up log warns, and `minicri version` says it. Before, Debian's
// spelling of the version did not parse and nothing was said.
func TestOldOnlyRuncIsLoud(t *testing.T) {
	dir := t.TempDir()
	runc := filepath.Join(dir, "runc")
	script := `#!/bin/sh
case "$1" in
--version) printf 'runc version 1.0.0~rc93+ds1\nspec: 1.0.2-dev\n' ;;
features) echo "No help topic for 'features'" >&2; exit 3 ;;
*) echo "fake runc: $*" >&2; exit 1 ;;
esac
`
	if err := os.WriteFile(runc, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := "[runtime.handlers.runc]\npath = \"" + runc + "\"\n"
	d := StartDaemon(t, WithConfig(conf))
	c := d.conditions(t)["RuncHasSecurityFixes"]
	if c.GetStatus() || c.GetReason() != "RuncLacksSecurityFixes" {
		t.Errorf("RuncHasSecurityFixes = %+v, want false, reason RuncLacksSecurityFixes", c)
	}
	for _, want := range []string{"1.0.0~rc93+ds1", runc, "CVE-2025-31133"} {
		if !strings.Contains(c.GetMessage(), want) {
			t.Errorf("RuncHasSecurityFixes message %q does not name %q", c.GetMessage(), want)
		}
	}
	if r := d.conditions(t)[runtime.RuntimeReady]; !r.GetStatus() {
		t.Errorf("RuntimeReady = %+v, want true: the node can still run pods", r)
	}
	var warned bool
	for _, line := range strings.Split(d.Output(), "\n") {
		if strings.Contains(line, "lacks security fixes") && strings.Contains(line, "1.0.0~rc93+ds1") &&
			strings.Contains(line, "default=true") && strings.Contains(line, "CVE-2025-31133") {
			warned = true
		}
	}
	if !warned {
		t.Errorf("the start-up log does not warn of the default runc's missing fixes:\n%s", d.Output())
	}

	path := filepath.Join(dir, "minicri.toml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := runMinicri(t, "--version", "--config", path)
	if code != 0 || !strings.Contains(out, "runtime handler runc (default): "+runc+", runc 1.0.0~rc93+ds1, LACKS") || !strings.Contains(out, "CVE-2025-31133") {
		t.Errorf("minicri --version: exit %d\n%s\nwant the default handler's runc and the fixes it lacks", code, out)
	}
}
