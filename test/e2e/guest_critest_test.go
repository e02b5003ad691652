//go:build e2e && guest

package e2e

import (
	"os"
	"regexp"
	"testing"
	"time"
)

// guestCritestImages points critest at the image the guest has: it pulls
// only what ImageStatus does not find, and the guest has no registry.
const guestCritestImages = "defaultTestContainerImage: " + guestBusyboxRef + "\n"

// TestGuestCritestAppArmor runs critest's AppArmor specs (skipped on a host
// without AppArmor) against the guest's minicri, in the guest: critest
// loads its test profiles with apparmor_parser and reads the host's
// AppArmor state itself. All 9 must run and pass.
func TestGuestCritestAppArmor(t *testing.T) {
	t.Parallel()
	g := bootedGuest(t)
	g.LogJournalOnFailure(t)
	if os.Getenv(critestEnv) == "" {
		t.Fatalf("%s is not set: the guest stage runs critest (hack/build-cri-tools.sh builds it; make guest-test sets it)", critestEnv)
	}
	g.WriteFile(t, "/etc/minicri-e2e/critest-images.yaml", []byte(guestCritestImages), 0o644)
	// critest runs apparmor_parser through sudo; root needs no sudo, and
	// the guest has none.
	g.WriteFile(t, "/usr/local/bin/sudo", []byte("#!/bin/sh\nexec \"$@\"\n"), 0o755)
	start := time.Now()
	out, code := g.RunErr(t, "cd /tmp && /mnt/host/critest --runtime-endpoint unix:///run/minicri/minicri.sock "+
		"--test-images-file /etc/minicri-e2e/critest-images.yaml -ginkgo.focus AppArmor -ginkgo.no-color 2>&1")
	t.Logf("critest ran for %.1f s", time.Since(start).Seconds())
	ran := regexp.MustCompile(`Ran (\d+) of \d+ Specs`).FindStringSubmatch(out)
	if code != 0 || ran == nil || ran[1] != "9" {
		t.Errorf("critest -ginkgo.focus AppArmor: exit %d, ran %v specs, want 9 passed:\n%s", code, ran, tail(out, 60))
	}
}
