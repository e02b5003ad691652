package image

import (
	"bufio"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sirupsen/logrus"

	"github.com/minicri/minicri/test/registry"
	tim "github.com/minicri/minicri/test/testimage"
)

// testTimeout bounds every pull, import and export of the tests.
const testTimeout = 30 * time.Second

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func quietLogger() logrus.FieldLogger {
	l := logrus.New()
	l.Out = io.Discard
	return l
}

// newTestStore opens a store in a temp dir (unless opts.Root is set) and,
// when the test ends, removes every rootfs it made and checks that nothing
// is left mounted below the root.
func newTestStore(t *testing.T, opts Options) *Store {
	t.Helper()
	requireRoot(t) // unpacking sets owners; rootfses mount
	if opts.Root == "" {
		opts.Root = t.TempDir()
	}
	if opts.Log == nil {
		opts.Log = quietLogger()
	}
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		for _, id := range s.Rootfses() {
			if err := s.RemoveRootfs(id); err != nil {
				t.Errorf("cleanup: remove rootfs %s: %v", id, err)
			}
		}
		if m := mountsBelow(t, s.Root()); len(m) > 0 {
			t.Errorf("mounts left below the store: %v", m)
		}
	})
	return s
}

func mountsBelow(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			out = append(out, fields[4])
		}
	}
	return out
}

// pushed is an image in a test registry.
type pushed struct {
	ref      string // "127.0.0.1:PORT/name:tag"
	digest   string // manifest digest
	configID string // config digest: the image ID
	img      v1.Image
}

func push(t *testing.T, reg *registry.Registry, repoTag string, img v1.Image) pushed {
	t.Helper()
	ref := reg.Host() + "/" + repoTag
	return pushed{ref: ref, digest: tim.Push(t, img, ref), configID: tim.ConfigDigest(t, img), img: img}
}

// proxy is a reverse proxy on 127.0.0.1 in front of a registry: it counts
// blob downloads and can tamper with blob bodies.
type proxy struct {
	srv *httptest.Server

	mu       sync.Mutex
	pings    int                 // GET /v2/: the registry client's handshakes
	blobGets map[string]int      // by digest
	ranges   map[string][]string // Range headers of blob GETs, by digest
	tamper   func(digest string, body io.ReadCloser) io.ReadCloser
	// noRanges, when set, makes the registry ignore range requests (the
	// whole blob, 200) and goes through the bodies it answers them with.
	noRanges func(body io.ReadCloser) io.ReadCloser
}

func startProxy(t *testing.T, upstreamHost string) *proxy {
	t.Helper()
	p := &proxy{blobGets: map[string]int{}, ranges: map[string][]string{}}
	target := &url.URL{Scheme: "http", Host: upstreamHost}
	rp := httputil.NewSingleHostReverseProxy(target)
	director := rp.Director
	rp.Director = func(r *http.Request) {
		director(r)
		if r.URL.Path == "/v2/" {
			p.mu.Lock()
			p.pings++
			p.mu.Unlock()
		}
		if digest, ok := blobDigest(r); ok && r.Header.Get("Range") != "" {
			p.mu.Lock()
			p.ranges[digest] = append(p.ranges[digest], r.Header.Get("Range"))
			if p.noRanges != nil {
				r.Header.Del("Range")
				r.Header.Set(strippedRange, "1")
			}
			p.mu.Unlock()
		}
	}
	rp.ErrorLog = log.New(io.Discard, "", 0) // cut connections are the point of some tests
	rp.FlushInterval = -1                    // a paced body reaches the client paced, not in 4 KiB bursts
	rp.ModifyResponse = func(resp *http.Response) error {
		digest, ok := blobDigest(resp.Request)
		if !ok || resp.Request.Method != http.MethodGet {
			return nil
		}
		p.mu.Lock()
		p.blobGets[digest]++
		tamper, noRanges := p.tamper, p.noRanges
		p.mu.Unlock()
		if resp.Request.Header.Get(strippedRange) != "" {
			resp.Body = noRanges(resp.Body)
			return nil
		}
		if tamper != nil && resp.StatusCode == http.StatusOK {
			resp.Body = tamper(digest, resp.Body)
		}
		return nil
	}
	p.srv = httptest.NewServer(rp)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *proxy) host() string { return strings.TrimPrefix(p.srv.URL, "http://") }

func (p *proxy) setTamper(f func(digest string, body io.ReadCloser) io.ReadCloser) {
	p.mu.Lock()
	p.tamper = f
	p.mu.Unlock()
}

func (p *proxy) gets() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.blobGets {
		out[k] = v
	}
	return out
}

func (p *proxy) pingCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pings
}

// strippedRange marks a request whose Range header the proxy took off.
const strippedRange = "X-Test-Stripped-Range"

func (p *proxy) ignoreRanges(f func(body io.ReadCloser) io.ReadCloser) {
	p.mu.Lock()
	p.noRanges = f
	p.mu.Unlock()
}

// rangesOf are the Range headers of the GETs of blob digest.
func (p *proxy) rangesOf(digest string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.ranges[digest]...)
}

func blobDigest(r *http.Request) (string, bool) {
	i := strings.Index(r.URL.Path, "/blobs/sha256:")
	if !strings.HasPrefix(r.URL.Path, "/v2/") || i < 0 {
		return "", false
	}
	return r.URL.Path[i+len("/blobs/"):], true
}

// layerDigests returns the digests of img's layer blobs.
func layerDigests(t *testing.T, img v1.Image) []string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d.String())
	}
	return out
}

// dirNames lists a directory of the store.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func blobExists(s *Store, digest string) bool {
	_, err := os.Stat(filepath.Join(s.path(blobsDir), strings.TrimPrefix(digest, "sha256:")))
	return err == nil
}

// assertNoImage checks that a failed pull or import left nothing visible
// and nothing half-made.
func assertNoImage(t *testing.T, s *Store) {
	t.Helper()
	if imgs := s.List(); len(imgs) != 0 {
		t.Fatalf("images after a failed operation: %+v", imgs)
	}
	if left := dirNames(t, s.path(tmpDir)); len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
}

func runtimeArch() string { return runtime.GOARCH }

func remoteTransport(reg *registry.Registry) remote.Option {
	return remote.WithTransport(reg.Transport())
}

func remoteAuth(user, password string) remote.Option {
	return remote.WithAuth(&authn.Basic{Username: user, Password: password})
}
