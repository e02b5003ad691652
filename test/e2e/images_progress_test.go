//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// A registry that stops sending a layer half-way fails the pull after
// image.pull_progress_timeout, not pull_timeout: Unavailable (the kubelet
// backs off and retries), naming the layer and what of it arrived. Then,
// the registry moving again, the same pull works. (A registry that trickles
// a byte a second is image/progress_test.go's.)
func TestPullFailsWhenALayerStalls(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	img := testimage.Busybox(t)
	testimage.Push(t, img, reg.Host()+"/e2e/busybox:latest")
	proxy := startStallProxy(t, reg.Host())
	ref := proxy.host() + "/e2e/busybox:latest"
	d := StartDaemon(t, WithArgs("--image-pull-progress-timeout", "2s"))

	proxy.stallLayers()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := d.Images.PullImage(ctx, &runtime.ImageSpec{Image: ref}, nil, nil)
	took := time.Since(start)
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("PullImage from a stalled registry = %v, want Unavailable", err)
	}
	layers, lerr := img.Layers()
	if lerr != nil {
		t.Fatal(lerr)
	}
	digest, _ := layers[0].Digest()
	for _, want := range []string{"layer " + digest.String(), "download stalled", "arrived", "image.pull_progress_timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q", want)
		}
	}
	if took < 2*time.Second || took > 30*time.Second {
		t.Errorf("the pull failed after %v, want soon after the 2s window", took)
	}
	if resp := d.imageStatus(t, ref, false); resp.GetImage() != nil {
		t.Fatalf("an image is listed after the stalled pull: %v", resp.GetImage())
	}

	proxy.unstall()
	d.pull(t, ref)
}
