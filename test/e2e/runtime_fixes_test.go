//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
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
