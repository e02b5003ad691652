package kernelfeat

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/mountinfo"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (mounts)")
	}
}

// kernelAtLeast reads the running kernel's release ("6.18.0-…").
func kernelAtLeast(t *testing.T, major, minor int) bool {
	t.Helper()
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	var maj, mnr int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(uts.Release[:]), "%d.%d", &maj, &mnr); err != nil {
		t.Fatalf("kernel release: %v", err)
	}
	return maj > major || maj == major && mnr >= minor
}

// Each probe answers what the running kernel does, by its release: this
// host (6.18) says yes to all; the guest (Debian 12, 6.1) no to
// lowerdir+ and the idmapped tmpfs, yes to the idmapped overlay on ext4.
func TestProbesMatchKernelRelease(t *testing.T) {
	requireRoot(t)
	before := mountCount(t)
	for _, c := range []struct {
		f            *Feature
		major, minor int
	}{
		{OverlayLowerdirPlus, 6, 8},
		{IDMappedTmpfs, 6, 3},
	} {
		want := kernelAtLeast(t, c.major, c.minor)
		if got := c.f.Get(); got.Supported != want {
			t.Errorf("%s = %v, want supported=%v (kernel from %d.%d)", c.f.Name, got, want, c.major, c.minor)
		}
	}
	SetLayerDir(t.TempDir())
	if got, want := IDMappedOverlay.Get(), kernelAtLeast(t, 5, 19); got.Supported != want && want {
		t.Errorf("%s = %v, want supported on a kernel from 5.19 (layers on %s)", IDMappedOverlay.Name, got, os.TempDir())
	}
	if after := mountCount(t); after != before {
		t.Errorf("probes left mounts: %d before, %d after", before, after)
	}
	left, _ := os.ReadDir(os.TempDir())
	for _, e := range left {
		if strings.HasPrefix(e.Name(), "minicri-probe-") {
			t.Errorf("probe scratch dir left: %s", e.Name())
		}
	}
}

func mountCount(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile(mountinfo.Path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "\n")
}

// Force gives a test the other kernel's answer and restores the probe's.
func TestForce(t *testing.T) {
	f := newFeature("testForced", func() error { return nil })
	restore := f.Force(false, "kernel before 6.5")
	if got := f.Get(); got.Supported || got.Reason != "kernel before 6.5" {
		t.Fatalf("forced answer = %v", got)
	}
	if got := Report()["testForced"]; got != "no: kernel before 6.5" {
		t.Errorf("Report = %q", got)
	}
	restore()
	if !f.Supported() {
		t.Errorf("after restore: %v, want the probe's yes", f.Get())
	}
}

// A probe that cannot run answers no (the 5.15 way) with why.
func TestCannotProbeAnswersNo(t *testing.T) {
	f := newFeature("testCannot", func() error { return cannotProbe("no scratch dir") })
	if got := f.Get(); got.Supported || !strings.Contains(got.Reason, "no scratch dir") {
		t.Fatalf("answer = %v, want no with the reason", got)
	}
}
