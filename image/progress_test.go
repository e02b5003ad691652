package image

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/minicri/minicri/test/registry"
	tim "github.com/minicri/minicri/test/testimage"
)

// incompressible is an image of one layer of n random bytes, so that its
// blob is about n bytes too.
func incompressible(t *testing.T, n int) v1.Image {
	t.Helper()
	body := make([]byte, n)
	if _, err := rand.Read(body); err != nil {
		t.Fatal(err)
	}
	return tim.Image(t, []v1.Layer{tim.Layer(t, tim.File("data", string(body), 0o644))})
}

// servePaced serves an image of one layer of about size bytes through a
// proxy whose layer body goes through pace; it returns the image's
// reference and the layer's digest.
func servePaced(t *testing.T, size int, pace func(io.ReadCloser) io.ReadCloser) (ref, layer string) {
	t.Helper()
	reg := registry.Start(t, registry.Options{})
	p := push(t, reg, "paced:1", incompressible(t, size))
	layer = layerDigests(t, p.img)[0]
	px := startProxy(t, reg.Host())
	px.setTamper(func(digest string, body io.ReadCloser) io.ReadCloser {
		if digest != layer {
			return body
		}
		return pace(body)
	})
	return px.host() + "/paced:1", layer
}

// trickle sends one byte every `every`, as a registry that holds a pull
// with a byte now and then; a read of the upstream body each time ends it
// when the client has gone.
type trickle struct {
	io.ReadCloser
	every time.Duration
}

func (r *trickle) Read(p []byte) (int, error) {
	time.Sleep(r.every)
	return r.ReadCloser.Read(p[:min(len(p), 1)])
}

// paced sends chunk bytes every `every`: slow, but moving. It keeps to a
// schedule, not to its sleeps: on a loaded machine a sleep ends late, and a
// server that only slept would send less than the rate it stands for; one
// woken late sends at once what the schedule owes.
type paced struct {
	io.ReadCloser
	chunk int
	every time.Duration
	start time.Time
	sent  int
}

func (r *paced) Read(p []byte) (int, error) {
	if r.start.IsZero() {
		r.start = time.Now()
	}
	time.Sleep(time.Until(r.start.Add(time.Duration(r.sent/r.chunk+1) * r.every)))
	owed := int(time.Since(r.start)/r.every)*r.chunk - r.sent
	n, err := io.ReadFull(r.ReadCloser, p[:min(len(p), max(r.chunk, owed))])
	r.sent += n
	return n, err
}

// A registry that sends one byte a second fails the pull once a window has
// passed without the least rate, with an error naming the layer and what
// of it arrived; nothing of the image is kept. containerd would wait.
func TestPullFailsWhenALayerTrickles(t *testing.T) {
	ref, layer := servePaced(t, 64<<10, func(body io.ReadCloser) io.ReadCloser {
		return &trickle{ReadCloser: body, every: time.Second}
	})
	window := 2 * time.Second
	s := newTestStore(t, Options{PullProgress: ProgressLimit{Window: window, MinRate: 1024}})
	start := time.Now()
	_, err := s.Pull(testContext(t), ref, nil)
	took := time.Since(start)
	var stall *StalledError
	if !errors.As(err, &stall) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("pull = %v, want a *StalledError (ErrUnavailable)", err)
	}
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	for _, want := range []string{layer, "of 64.", "KiB arrived", "in the last 2s", "image.pull_progress_timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if stall.Bytes < 1 || stall.Bytes > 8 || stall.Name != layer || stall.What != "layer" {
		t.Errorf("stall: layer %s, %d bytes arrived; want %s and a few bytes (one a second)", stall.Name, stall.Bytes, layer)
	}
	if took < window || took > window+10*time.Second {
		t.Errorf("the pull failed after %v, want soon after the %v window", took, window)
	}
	if blobExists(s, layer) {
		t.Errorf("the stalled layer's blob is stored")
	}
	assertNoImage(t, s)
}

// A download slower than the registry could go, but above the rate, is
// never cancelled, however many windows it takes.
func TestPullSlowButMovingSucceeds(t *testing.T) {
	ref, _ := servePaced(t, 48<<10, func(body io.ReadCloser) io.ReadCloser {
		return &paced{ReadCloser: body, chunk: 2 << 10, every: 100 * time.Millisecond} // 20 KiB/s
	})
	window := 500 * time.Millisecond // asks 2 KiB a window (4 KiB/s); it gets about 10 KiB
	s := newTestStore(t, Options{PullProgress: ProgressLimit{Window: window, MinRate: 4 << 10}})
	start := time.Now()
	if _, err := s.Pull(testContext(t), ref, nil); err != nil {
		t.Fatalf("a pull at 20 KiB/s with 4 KiB/s asked: %v", err)
	}
	if took := time.Since(start); took < 3*window {
		t.Fatalf("the download took %v, not the several windows that make this test worth it", took)
	}
}

// Unpacking is not downloading: a layer whose bytes are all in and that
// waits (here, for an unpack slot, for several windows) is never judged.
func TestPullProgressIgnoresUnpackTime(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	push(t, reg, "unpack:1", incompressible(t, 16<<10))
	// Any download passes this; a layer judged while it waits (0 bytes a
	// window) would not.
	window := 500 * time.Millisecond
	s := newTestStore(t, Options{PullProgress: ProgressLimit{Window: window, MinRate: 1024}})
	held := holdUnpackSlots(s)
	released := make(chan struct{})
	go func() {
		time.Sleep(5 * window)
		for _, release := range held {
			release()
		}
		close(released)
	}()
	t.Cleanup(func() { <-released })
	start := time.Now()
	if _, err := s.Pull(testContext(t), reg.Host()+"/unpack:1", nil); err != nil {
		t.Fatalf("a pull whose unpack waited %v with a %v window: %v", 5*window, window, err)
	}
	if took := time.Since(start); took < 5*window {
		t.Fatalf("the pull took %v: it did not wait for its unpack", took)
	}
}

// The rule itself, step by step: a window must bring its bytes; a download
// younger than a window, or whose bytes are all in, is not judged.
func TestProgressJudgesEveryWindow(t *testing.T) {
	limit := ProgressLimit{Window: 10 * time.Second, MinRate: 100} // 1000 bytes a window
	t0 := time.Unix(1000, 0)
	l := &layerProgress{what: layerDownload, name: "sha256:x", total: 1 << 20, start: t0, samples: []progressSample{{at: t0}}}
	steps := []struct {
		after time.Duration
		bytes int64
		stall bool
	}{
		{5 * time.Second, 0, false},   // younger than a window
		{10 * time.Second, 999, true}, // a whole window, one byte short
	}
	for _, st := range steps {
		l.bytes.Store(st.bytes)
		if err := l.judge(t0.Add(st.after), limit); (err != nil) != st.stall {
			t.Fatalf("at %v with %d bytes: %v, want stalled %v", st.after, st.bytes, err, st.stall)
		}
	}
	// Moving at 200 bytes a second, twice the rate, judged each second.
	l = &layerProgress{what: layerDownload, name: "sha256:y", total: 1 << 20, start: t0, samples: []progressSample{{at: t0}}}
	for s := 1; s <= 60; s++ {
		l.bytes.Store(int64(s) * 200)
		if err := l.judge(t0.Add(time.Duration(s)*time.Second), limit); err != nil {
			t.Fatalf("at %ds, 200 bytes a second: %v", s, err)
		}
	}
	if len(l.samples) > 12 {
		t.Errorf("%d samples kept for a 10s window judged each second", len(l.samples))
	}
	// It stops at 60s: the last 10s hold 1000 bytes until 65s, 800 at 66s.
	for s := 61; s <= 66; s++ {
		err := l.judge(t0.Add(time.Duration(s)*time.Second), limit)
		if s <= 65 && err != nil {
			t.Fatalf("at %ds, %ds after it stopped, with a window's bytes still in the window: %v", s, s-60, err)
		}
		if s == 66 && err == nil {
			t.Fatalf("at %ds, 800 bytes in the last 10s: not stalled", s)
		}
	}
	// All in, being stored: not judged.
	l.bytes.Store(l.total)
	if err := l.judge(t0.Add(200*time.Second), limit); err != nil {
		t.Fatalf("a download with every byte in: %v", err)
	}
}

// The image config is a download of the pull too: one that trickles ends
// the pull by the progress window, naming the config. Before, the config
// was fetched outside the progress check, under pull_timeout only.
func TestPullFailsWhenTheConfigTrickles(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := push(t, reg, "paced:1", incompressible(t, 1<<10))
	px := startProxy(t, reg.Host())
	px.setTamper(func(digest string, body io.ReadCloser) io.ReadCloser {
		if digest != p.configID {
			return body
		}
		return &trickle{ReadCloser: body, every: time.Second}
	})
	window := 2 * time.Second
	s := newTestStore(t, Options{PullProgress: ProgressLimit{Window: window, MinRate: 1024}})
	_, err := s.Pull(testContext(t), px.host()+"/paced:1", nil)
	var stall *StalledError
	if !errors.As(err, &stall) || !errors.Is(err, ErrUnavailable) || stall.What != "image config" || stall.Name != p.configID {
		t.Fatalf("pull with a trickling config = %v, want a *StalledError of the image config %s", err, p.configID)
	}
	assertNoImage(t, s)
}

// A signature payload is a download of the pull too: a mirror that
// trickles one ends the pull by the progress window, naming the payload,
// not by pull_timeout.
func TestPullFailsWhenASignaturePayloadTrickles(t *testing.T) {
	r := startSignedRegistry(t)
	payload := tim.Payload(r.repo, r.signed.digest)
	sum := sha256.Sum256(payload)
	payloadDigest := fmt.Sprintf("sha256:%x", sum)
	r.px.setTamper(func(digest string, body io.ReadCloser) io.ReadCloser {
		if digest != payloadDigest {
			return body
		}
		return &trickle{ReadCloser: body, every: time.Second}
	})
	window := 2 * time.Second
	s := newTestStore(t, Options{SignaturePolicy: r.policy(t, t.TempDir()), PullTimeout: time.Minute,
		PullProgress: ProgressLimit{Window: window, MinRate: 1024}})
	start := time.Now()
	_, err := s.Pull(testContext(t), r.repo+":signed", nil)
	took := time.Since(start)
	var stall *StalledError
	if !errors.As(err, &stall) || !errors.Is(err, ErrUnavailable) || stall.What != "signature payload" || stall.Name != payloadDigest {
		t.Fatalf("pull with a trickling signature payload = %v, want a *StalledError of the payload %s", err, payloadDigest)
	}
	if took > window+10*time.Second {
		t.Errorf("the pull failed after %v, want soon after the %v window", took, window)
	}
	assertNoImage(t, s)
}

// A registry's referrers list is a download of the pull too: one that
// trickles ends the pull by the progress window, naming it.
func TestPullFailsWhenTheReferrersTrickle(t *testing.T) {
	reg := ggcrregistry.New(ggcrregistry.WithReferrersSupport(true), ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.URL.Path, "/referrers/") {
			reg.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		reg.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		for _, b := range rec.Body.Bytes() {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Second):
			}
			_, _ = w.Write([]byte{b})
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	digest := tim.Push(t, tim.Busybox(t), host+"/app:v1")
	policy := writePolicy(t, t.TempDir(), "p.json", fmt.Sprintf(`{"default": [{"type": "sigstoreSigned", "keyPath": %q}]}`, keyFile(t, tim.NewSigningKey(t))))
	window := 2 * time.Second
	s := newTestStore(t, Options{SignaturePolicy: policy, PullTimeout: time.Minute, PullProgress: ProgressLimit{Window: window, MinRate: 1024}})
	start := time.Now()
	_, err := s.Pull(testContext(t), host+"/app:v1", nil)
	var stall *StalledError
	if !errors.As(err, &stall) || stall.What != "referrers of" || stall.Name != digest {
		t.Fatalf("pull with trickling referrers = %v, want a *StalledError of the referrers of %s", err, digest)
	}
	if took := time.Since(start); took > window+10*time.Second {
		t.Errorf("the pull failed after %v, want soon after the %v window", took, window)
	}
	assertNoImage(t, s)
}
