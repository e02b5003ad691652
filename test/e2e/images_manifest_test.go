//go:build e2e

package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/registry"
)

// hugeManifestSize is the manifest of the attack: 90 MiB.
const hugeManifestSize int64 = 90 << 20

// serveHugeManifest answers with a manifest that goes on for 90 MiB.
func serveHugeManifest(w http.ResponseWriter, r *http.Request, out io.Writer) {
	w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
	registry.WriteHugeManifest(out, hugeManifestSize)
}

// maxManifestPullGrowth bounds what the daemon's peak RSS may grow by
// while it refuses huge manifests: far less than one manifest's size.
const maxManifestPullGrowth = 64 << 20

// The attack: a registry serving a 90 MiB manifest, one pull and then four
// at once, which the registry client would read up to 100 MiB of each.
// Each is refused with ResourceExhausted naming the manifest, having read
// about the 4 MiB cap, and the daemon's peak RSS (VmHWM) grows by less than
// maxManifestPullGrowth.
func TestOversizeManifestIsRefusedCheaply(t *testing.T) {
	reg := registry.ServeManifests(t, serveHugeManifest)
	d := StartDaemon(t)
	pid := d.cmd.Process.Pid
	for _, pulls := range []int{1, 4} {
		resetPeakRSS(t, pid)
		before := peakRSS(t, pid)
		reg.Sent.Store(0)
		var wg sync.WaitGroup
		errs := make([]error, pulls)
		for i := range pulls {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				_, errs[i] = d.Images.PullImage(ctx, &runtime.ImageSpec{Image: reg.Ref("big")}, nil, nil)
			})
		}
		wg.Wait()
		peak := peakRSS(t, pid)
		t.Logf("%d pulls: daemon peak RSS %.1f MiB before, %.1f MiB during; the registry got %.1f MiB out; %v",
			pulls, float64(before)/(1<<20), float64(peak)/(1<<20), float64(reg.Sent.Load())/(1<<20), errs[0])
		for i, err := range errs {
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "manifest big") || !strings.Contains(err.Error(), "4194304 bytes allowed") {
				t.Errorf("pull %d of %d of a 90 MiB manifest = %v; want ResourceExhausted naming the manifest and the 4 MiB cap", i+1, pulls, err)
			}
		}
		if grew := peak - before; grew >= maxManifestPullGrowth {
			t.Errorf("%d pulls of a 90 MiB manifest grew the daemon's peak RSS by %d MiB, want < %d MiB", pulls, grew>>20, maxManifestPullGrowth>>20)
		}
		// Each pull read about the cap; the socket buffers hold some more.
		if sent := reg.Sent.Load(); sent > int64(pulls)*(4<<20+16<<20) {
			t.Errorf("%d pulls got %d MiB of the manifest out of the registry, want about 4 MiB each", pulls, sent>>20)
		}
	}
	if images := d.listImages(t, ""); len(images) != 0 {
		t.Errorf("images after the refused pulls: %v", imageIDs(images))
	}
}

// A registry that answers a manifest request with headers and a few bytes,
// then nothing: the pull ends by image.pull_progress_timeout, Unavailable,
// naming the manifest. Before, manifests were under pull_timeout only (10
// minutes by default, the kubelet's pulls queued behind).
func TestStalledManifestEndsByTheProgressTimeout(t *testing.T) {
	reg := registry.ServeManifests(t, func(w http.ResponseWriter, r *http.Request, out io.Writer) {
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		_, _ = io.WriteString(out, `{"schemaVersion":2,`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	d := StartDaemon(t, WithArgs("--image-pull-progress-timeout", "2s"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := d.Images.PullImage(ctx, &runtime.ImageSpec{Image: reg.Ref("slow")}, nil, nil)
	took := time.Since(start)
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "manifest slow: download stalled") {
		t.Fatalf("PullImage of a stalling manifest = %v, want Unavailable naming the stalled manifest", err)
	}
	if took > 40*time.Second {
		t.Errorf("the pull ended after %v, want soon after the 2s window", took)
	}
}
