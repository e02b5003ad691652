//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// The layer an attacker showed: 60,000 empty directories under 4 KB paths,
// 2 MB gzipped. An unpacker that kept each directory's path peaked at
// 925 MiB for it. The paths stop short of 4 KB so that they fit PATH_MAX
// below the store's temp dir.
const (
	deepDirs      = 60_000
	deepPathLen   = 3900
	maxUnpackRSS  = 100 << 20 // bytes
	unpackTimeout = 5 * time.Minute
)

func deepDirsImage(t *testing.T) v1.Image {
	t.Helper()
	return testimage.Image(t, []v1.Layer{testimage.DeepDirsLayer(t, deepDirs, deepPathLen)})
}

// TestImportOfDeepDirectoriesStaysSmall imports the hostile layer with
// `minicri image import` and bounds the peak RSS of the process.
func TestImportOfDeepDirectoriesStaysSmall(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "deep.tar")
	testimage.WriteOCILayout(t, archive, map[string]v1.Image{"example.com/deep:v1": deepDirsImage(t)})
	d := NewDaemon(t)
	rss, out := importPeakRSS(t, d, archive)
	t.Logf("peak RSS of minicri image import of %d directories under %d-byte paths: %.1f MiB", deepDirs, deepPathLen, float64(rss)/(1<<20))
	benchLog(t, "import", rss)
	if !strings.Contains(out, "example.com/deep:v1") {
		t.Fatalf("import printed %q, want the image it imported", out)
	}
	if rss >= maxUnpackRSS {
		t.Fatalf("minicri image import peaked at %d MiB RSS, want < %d MiB", rss>>20, maxUnpackRSS>>20)
	}
	checkDeepDirs(t, d)
}

// importPeakRSS runs `minicri image import FILE` on d's store and returns the
// peak RSS of the process (bytes) and its output.
func importPeakRSS(t *testing.T, d *Daemon, archive string) (int64, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), unpackTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "minicri"), append([]string{"image", "import", archive}, d.args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// A child's Maxrss starts from the peak RSS of the process it was forked
	// from (the kernel carries the old mm's peak over exec): bring this
	// test's own down to what it holds now, so that the child's is its own
	// or, at most, what this process holds.
	debug.FreeOSMemory()
	resetPeakRSS(t, os.Getpid())
	t.Logf("this test process holds %.1f MiB at the fork", float64(procStatusBytes(t, os.Getpid(), "VmRSS:"))/(1<<20))
	if err := cmd.Run(); err != nil {
		t.Fatalf("minicri image import: %v\n%s", err, out.String())
	}
	// Maxrss is in KiB on Linux.
	return cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10, out.String()
}

// TestPullOfDeepDirectoriesStaysSmall pulls the hostile layer through the
// daemon and bounds the daemon's peak RSS during the pull (VmHWM, reset
// before it through clear_refs).
func TestPullOfDeepDirectoriesStaysSmall(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := pushImage(t, reg, "deep:v1", deepDirsImage(t))
	d := StartDaemon(t)
	pid := d.cmd.Process.Pid
	resetPeakRSS(t, pid)
	before := peakRSS(t, pid)
	ctx, cancel := context.WithTimeout(context.Background(), unpackTimeout)
	defer cancel()
	if _, err := d.Images.PullImage(ctx, &runtime.ImageSpec{Image: p.ref}, nil, nil); err != nil {
		t.Fatalf("pull %s: %v", p.ref, err)
	}
	peak := peakRSS(t, pid)
	t.Logf("daemon peak RSS: %.1f MiB before the pull, %.1f MiB during it", float64(before)/(1<<20), float64(peak)/(1<<20))
	benchLog(t, "pull", peak)
	if peak >= maxUnpackRSS {
		t.Fatalf("the daemon peaked at %d MiB RSS pulling %d directories, want < %d MiB", peak>>20, deepDirs, maxUnpackRSS>>20)
	}
	checkDeepDirs(t, d)
}

// resetPeakRSS sets pid's VmHWM back to its current RSS.
func resetPeakRSS(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset the peak RSS of %d: %v", pid, err)
	}
}

// peakRSS reads pid's VmHWM, in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	return procStatusBytes(t, pid, "VmHWM:")
}

// procStatusBytes reads a field in kB of /proc/PID/status, in bytes.
func procStatusBytes(t *testing.T, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("%s of %d: %q: %v", field, pid, v, err)
			}
			return kib << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status (%v)", field, pid, s.Err())
	return 0
}

// checkDeepDirs finds the unpacked layer in d's store and counts the
// directories at its bottom: the layer was unpacked whole.
func checkDeepDirs(t *testing.T, d *Daemon) {
	t.Helper()
	layers, err := os.ReadDir(filepath.Join(d.Root, "image", "layers"))
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers in the store: %v (%v), want the one of the image", layers, err)
	}
	dir := filepath.Join(d.Root, "image", "layers", layers[0].Name())
	for range deepPathLen / 256 {
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 1 {
			t.Fatalf("%d entries (%v) on the way down the layer, want 1", len(entries), err)
		}
		dir = filepath.Join(dir, entries[0].Name())
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != deepDirs {
		t.Fatalf("%d directories (%v) at the bottom of the layer, want %d", len(entries), err, deepDirs)
	}
}

// benchLog prints a row of hack/bench.sh's unpack table when it runs the test.
func benchLog(t *testing.T, how string, peak int64) {
	if os.Getenv("MINICRI_BENCH") != "" {
		fmt.Printf("  %-58s %8.1f MiB   goal < %d MiB\n",
			fmt.Sprintf("peak RSS, %s of %d dirs under %d-byte paths", how, deepDirs, deepPathLen), float64(peak)/(1<<20), maxUnpackRSS>>20)
	}
}
