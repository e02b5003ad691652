package kernelfeat

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
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
// lowerdir+ and the idmapped tmpfs, yes to the idmapped overlay on ext4
// and to recursive read-only mounts; Debian 11's 5.10 no to all.
func TestProbesMatchKernelRelease(t *testing.T) {
	requireRoot(t)
	// Everything the probes make goes under this test's own dirs: the
	// node's mount table and /tmp change under it (other packages' tests,
	// daemons), so only what lies in them is this test's to check.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	layers := t.TempDir()
	for _, c := range []struct {
		f            *Feature
		major, minor int
	}{
		{OverlayLowerdirPlus, 6, 8},
		{IDMappedTmpfs, 6, 3},
		{RecursiveReadOnly, 5, 12},
	} {
		want := kernelAtLeast(t, c.major, c.minor)
		if got := c.f.Get(); got.Supported != want {
			t.Errorf("%s = %v, want supported=%v (kernel from %d.%d)", c.f.Name, got, want, c.major, c.minor)
		}
	}
	SetLayerDir(layers)
	if got, want := IDMappedOverlay.Get(), kernelAtLeast(t, 5, 19); got.Supported != want && want {
		t.Errorf("%s = %v, want supported on a kernel from 5.19 (layers on %s)", IDMappedOverlay.Name, got, os.TempDir())
	}
	for _, dir := range []string{tmp, layers} {
		if n := mountsUnder(t, dir); n != 0 {
			t.Errorf("probes left %d mounts under %s", n, dir)
		}
		left, _ := os.ReadDir(dir)
		for _, e := range left {
			t.Errorf("probe scratch dir left: %s", filepath.Join(dir, e.Name()))
		}
	}
}

// mountsUnder counts the node's mounts at dir or below it.
func mountsUnder(t *testing.T, dir string) int {
	t.Helper()
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Fatal(err)
	}
	return len(mounts)
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
