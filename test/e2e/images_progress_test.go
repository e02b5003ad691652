//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
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

// A mirror that stops sending a signature payload half-way fails the pull
// after image.pull_progress_timeout, not pull_timeout, naming the payload:
// a signature policy's downloads are under the same watch as the image's.
// Then, the mirror moving again, the same pull works.
func TestPullFailsWhenASignaturePayloadStalls(t *testing.T) {
	s := pushSignedImages(t)
	proxy := startStallProxy(t, s.reg.Host())
	repo := proxy.host() + "/e2e/app"
	sig := s.key.Sign(t, repo, s.signed.digest) // cosign's identity: the repository as the puller names it
	testimage.PushSignatures(t, s.repo, s.signed.digest, []testimage.Signature{sig})
	payload := fmt.Sprintf("sha256:%x", sha256.Sum256(sig.Payload))
	keyPath := filepath.Join(t.TempDir(), "cosign.pub")
	writeFile(t, keyPath, string(s.key.PublicPEM), 0o644)
	policy := filepath.Join(t.TempDir(), "policy.json")
	writeFile(t, policy, fmt.Sprintf(`{"default": [{"type": "reject"}], "transports": {"docker": {%q: [
		{"type": "sigstoreSigned", "keyPath": %q, "signedIdentity": {"type": "matchRepository"}}]}}}`, repo, keyPath), 0o644)
	d := StartDaemon(t, WithArgs("--image-pull-progress-timeout", "2s"),
		WithConfig(fmt.Sprintf("[image]\nsignature_policy = %q\npull_timeout = \"60s\"\n", policy)))
	ref := repo + ":signed"

	proxy.stallBlob(payload)
	start := time.Now()
	_, err := d.pullErr(ref, nil)
	took := time.Since(start)
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("PullImage with a stalled signature payload = %v, want Unavailable", err)
	}
	for _, want := range []string{"signature payload " + payload, "download stalled", "image.pull_progress_timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q", want)
		}
	}
	if took > 30*time.Second {
		t.Errorf("the pull failed after %v, want soon after the 2s window, long before pull_timeout", took)
	}
	if resp := d.imageStatus(t, ref, false); resp.GetImage() != nil {
		t.Fatalf("an image is listed after the stalled pull: %v", resp.GetImage())
	}

	proxy.unstall()
	if got := d.pull(t, ref); got != s.signed.id {
		t.Fatalf("PullImage once the mirror moves = %s, want %s", got, s.signed.id)
	}
}
