//go:build e2e && guest

package e2e

import (
	"os"
	"regexp"
	"strconv"
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
	g.critest(t, "AppArmor", 9)
}

// TestGuestCritestUserNamespaces runs critest's user namespace specs in the
// guest, where the kernel can idmap what a pod in a user namespace needs:
// all 6 must run and pass (critest skips them where Status advertises no
// user namespaces).
func TestGuestCritestUserNamespaces(t *testing.T) {
	t.Parallel()
	g, d := guestTest(t)
	g.needsKernel(t, d, guestUsernsKernel...)
	g.critest(t, "UserNamespaces", 6)
}

// critest runs critest's specs matching focus against the guest's minicri,
// in the guest, and wants exactly specs of them run, all passed.
func (g *Guest) critest(t *testing.T, focus string, specs int) {
	t.Helper()
	if os.Getenv(critestEnv) == "" {
		t.Fatalf("%s is not set: the guest stage runs critest (hack/build-cri-tools.sh builds it; make guest-test sets it)", critestEnv)
	}
	// Once per guest: two critest runs at once must not see these files
	// being written.
	g.critestOnce.Do(func() {
		g.WriteFile(t, "/etc/minicri-e2e/critest-images.yaml", []byte(guestCritestImages), 0o644)
		// critest runs apparmor_parser through sudo; root needs no sudo,
		// and the guest has none.
		g.WriteFile(t, "/usr/local/bin/sudo", []byte("#!/bin/sh\nexec \"$@\"\n"), 0o755)
	})
	start := time.Now()
	// critest's AppArmor specs alone take minutes under TCG.
	out, code := g.RunErrWithin(t, "cd /tmp && /mnt/host/critest --runtime-endpoint unix:///run/minicri/minicri.sock "+
		"--test-images-file /etc/minicri-e2e/critest-images.yaml -ginkgo.focus "+shellQuote(focus)+" -ginkgo.no-color 2>&1", g.Timeout(3*time.Minute))
	t.Logf("critest -ginkgo.focus %s ran for %.1f s", focus, time.Since(start).Seconds())
	ran := regexp.MustCompile(`Ran (\d+) of \d+ Specs`).FindStringSubmatch(out)
	if code != 0 || ran == nil || ran[1] != strconv.Itoa(specs) {
		t.Errorf("critest -ginkgo.focus %s: exit %d, ran %v specs, want %d passed:\n%s", focus, code, ran, specs, tail(out, 60))
	}
}
