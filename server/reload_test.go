package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
)

// TestReloadPinnedImages: a reload pins what the new config names; one
// whose pinned image is no reference changes nothing.
func TestReloadPinnedImages(t *testing.T) {
	ts := newTestServer(t)
	pinned := func() bool {
		st, err := ts.ImageStatus(bg, &runtime.ImageStatusRequest{Image: &runtime.ImageSpec{Image: "docker.io/library/busybox:latest"}})
		if err != nil {
			t.Fatal(err)
		}
		return st.GetImage().GetPinned()
	}
	if pinned() {
		t.Fatal("busybox pinned before any reload")
	}
	cfg := ts.cfg
	cfg.Image.PinnedImages = map[string]string{"base": "busybox"}
	if err := ts.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if !pinned() {
		t.Fatal("busybox not pinned after the reload that pins it")
	}
	bad := cfg
	bad.Image.PinnedImages = map[string]string{"base": "sha256:" + strings.Repeat("a", 64)}
	err := ts.Reload(bad)
	var invalid *config.InvalidError
	if err == nil || !errors.As(err, &invalid) || invalid.Key != "image.pinned_images.base" {
		t.Fatalf("reload with a bad pinned image: %v, want an error naming image.pinned_images.base", err)
	}
	if !pinned() {
		t.Fatal("a refused reload changed the pinned images")
	}
}

// TestReloadShowsInStatus: crictl info's config is what is in force.
func TestReloadShowsInStatus(t *testing.T) {
	ts := newTestServer(t)
	cfg := ts.cfg
	cfg.LogLevel = "debug"
	cfg.Image.PullTimeout = config.Duration(7 * time.Minute)
	cfg.Image.SignaturePolicy = "/etc/minicri/policy.json"
	cfg.Image.SignaturePolicyDir = "/etc/minicri/policies"
	cfg.Streaming.Port = 4242 // not reloadable
	if err := ts.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	got := ts.configInForce()
	if got.LogLevel != "debug" || got.Image.PullTimeout != cfg.Image.PullTimeout || got.Streaming.Port == 4242 {
		t.Errorf("config in force: log_level %s, pull_timeout %v, streaming.port %d", got.LogLevel, got.Image.PullTimeout, got.Streaming.Port)
	}
	if got.Image.SignaturePolicy != cfg.Image.SignaturePolicy || got.Image.SignaturePolicyDir != cfg.Image.SignaturePolicyDir {
		t.Errorf("config in force: signature_policy %q, signature_policy_dir %q; want the reloaded ones", got.Image.SignaturePolicy, got.Image.SignaturePolicyDir)
	}
	if live := imageReloadable(cfg); live.SignaturePolicy != cfg.Image.SignaturePolicy || live.SignaturePolicyDir != cfg.Image.SignaturePolicyDir {
		t.Errorf("the image store is given signature_policy %q, signature_policy_dir %q", live.SignaturePolicy, live.SignaturePolicyDir)
	}
}
