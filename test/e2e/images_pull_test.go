//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// A connection that drops in the middle of a layer is resumed from the
// byte it stopped at (an HTTP range request): the pull succeeds without
// the kubelet's retry, and the layer's bytes are not fetched twice.
func TestPullResumesALayerAfterAConnectionDrop(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := pushImage(t, reg, "resume:v1", testimage.Busybox(t))
	proxy := startCuttingProxy(t, reg.Host())
	counter := startCountingProxy(t, strings.TrimPrefix(proxy.srv.URL, "http://"))
	ref := counter.host() + "/e2e/resume:v1"
	layer := layerDigest(t, p.img, 0)
	proxy.arm(layer, 256<<10, func() {}) // cuts only whole-blob answers (200), not the resumed rest (206)
	d := StartDaemon(t)

	if got := d.pull(t, ref); got != p.id {
		t.Fatalf("pull through a connection dropped mid-layer = %s, want %s", got, p.id)
	}
	ranges := counter.rangesOf(layer)
	if len(ranges) != 1 || ranges[0] == "bytes=0-" {
		t.Fatalf("range requests of the layer: %q, want one, from where the connection dropped", ranges)
	}
	if !strings.Contains(d.Output(), "resuming") {
		t.Error("the daemon's log does not say the layer download resumed")
	}
}

// The kubelet pulls in parallel (serializeImagePulls: false): two pulls of
// one image at once both succeed, and each blob is downloaded once.
func TestParallelPullsOfOneImageShareTheWork(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := pushImage(t, reg, "parallel:v1", testimage.MultiLayer(t))
	counter := startCountingProxy(t, reg.Host())
	ref := counter.host() + "/e2e/parallel:v1"
	d := StartDaemon(t)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids := make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() { ids[i], errs[i] = d.Images.PullImage(ctx, &runtime.ImageSpec{Image: ref}, nil, nil) })
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil || ids[i] != p.id {
			t.Fatalf("pull %d = %s, %v; want %s", i, ids[i], errs[i], p.id)
		}
	}
	for i := range 2 {
		l := layerDigest(t, p.img, i)
		if n := counter.gets(l); n != 1 {
			t.Errorf("layer %s downloaded %d times, want 1", l, n)
		}
	}
	if n := counter.gets(p.id); n != 1 {
		t.Errorf("config downloaded %d times, want 1", n)
	}
	if st := d.imageStatus(t, ref, false).GetImage(); st.GetId() != p.id {
		t.Fatalf("ImageStatus after the parallel pulls = %v", st)
	}
}

// The kubelet pulls in parallel: a small image pulled while a large one
// has many layers waiting to unpack takes the next free unpack slot in
// turn with it, instead of waiting behind every one of its layers. So
// the small pull ends while most of the large image's layers are still
// to unpack. A hostile image of many layers holds no other pull back
// longer than one of its layers takes.
func TestParallelPullsTakeTurnsAtUnpacking(t *testing.T) {
	const bigLayers, filesALayer = 12, 1000
	reg := registry.Start(t, registry.Options{})
	layers := make([]v1.Layer, bigLayers)
	for i := range layers {
		entries := []testimage.Entry{testimage.Dir(fmt.Sprintf("l%d", i), 0o755)}
		for f := range filesALayer {
			entries = append(entries, testimage.File(fmt.Sprintf("l%d/f%d", i, f), "x", 0o644))
		}
		layers[i] = testimage.Layer(t, entries...)
	}
	big := pushImage(t, reg, "big:v1", testimage.Image(t, layers))
	small := pushImage(t, reg, "small:v1", testimage.Image(t, []v1.Layer{testimage.Layer(t, testimage.File("small", "x", 0o644))}))
	d := StartDaemon(t)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bigDone := make(chan error, 1)
	go func() {
		_, err := d.Images.PullImage(ctx, &runtime.ImageSpec{Image: big.ref}, nil, nil)
		bigDone <- err
	}()
	// Half the large image's blobs are in: the layers beyond the two
	// unpack slots wait for one.
	blobs := filepath.Join(d.Root, "image/blobs/sha256")
	waitFor(t, "half the large image's blobs", time.Minute, func() bool {
		n := 0
		for i := range bigLayers {
			if _, err := os.Stat(filepath.Join(blobs, strings.TrimPrefix(layerDigest(t, big.img, i), "sha256:"))); err == nil {
				n++
			}
		}
		return n >= bigLayers/2
	})
	if _, err := d.Images.PullImage(ctx, &runtime.ImageSpec{Image: small.ref}, nil, nil); err != nil {
		t.Fatalf("pull the small image: %v", err)
	}
	unpacked, err := os.ReadDir(filepath.Join(d.Root, "image/layers"))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-bigDone; err != nil {
		t.Fatalf("pull the large image: %v", err)
	}
	// One of the layer dirs is the small image's.
	if n := len(unpacked) - 1; n > bigLayers-bigLayers/4 {
		t.Errorf("the small pull ended after %d of the large image's %d layers were unpacked: it waited behind them", n, bigLayers)
	}
}

// countingProxy is a reverse proxy on 127.0.0.1 in front of a registry
// that counts the GETs of each blob and keeps their Range headers.
type countingProxy struct {
	srv    *httptest.Server
	mu     sync.Mutex
	count  map[string]int
	ranges map[string][]string
}

func startCountingProxy(t *testing.T, upstreamHost string) *countingProxy {
	t.Helper()
	p := &countingProxy{count: map[string]int{}, ranges: map[string][]string{}}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: upstreamHost})
	rp.ErrorLog = log.New(io.Discard, "", 0)
	director := rp.Director
	rp.Director = func(r *http.Request) {
		director(r)
		i := strings.LastIndex(r.URL.Path, "/blobs/")
		if r.Method != http.MethodGet || i < 0 {
			return
		}
		digest := r.URL.Path[i+len("/blobs/"):]
		p.mu.Lock()
		defer p.mu.Unlock()
		p.count[digest]++
		if rg := r.Header.Get("Range"); rg != "" {
			p.ranges[digest] = append(p.ranges[digest], rg)
		}
	}
	p.srv = httptest.NewServer(rp)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *countingProxy) host() string { return strings.TrimPrefix(p.srv.URL, "http://") }

func (p *countingProxy) gets(digest string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count[digest]
}

func (p *countingProxy) rangesOf(digest string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.ranges[digest]...)
}
