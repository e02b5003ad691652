package image

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/minicri/minicri/test/registry"
	tim "github.com/minicri/minicri/test/testimage"
)

func TestEndpoints(t *testing.T) {
	s := newTestStore(t, Options{Registries: map[string]RegistryConfig{
		"docker.io":             {Mirrors: []string{"https://mirror.internal:5000", "http://10.1.2.3:5001", "plain.internal:443"}},
		"insecure.example:5000": {Insecure: true},
		"self-signed.internal":  {Insecure: true},
		"quay.io":               {Mirrors: []string{"self-signed.internal"}},
	}})
	type ep struct{ label, registry, repo, scheme string }
	for _, tc := range []struct {
		ref  string
		want []ep
	}{
		{"busybox", []ep{
			{"mirror https://mirror.internal:5000", "mirror.internal:5000", "library/busybox", "https"},
			{"mirror http://10.1.2.3:5001", "10.1.2.3:5001", "library/busybox", "http"},
			{"mirror plain.internal:443", "plain.internal:443", "library/busybox", "https"},
			{"registry docker.io", "index.docker.io", "library/busybox", "https"},
		}},
		{"insecure.example:5000/app:1", []ep{{"registry insecure.example:5000", "insecure.example:5000", "app", "http"}}},
		{"quay.io/org/app", []ep{
			{"mirror self-signed.internal", "self-signed.internal", "org/app", "http"},
			{"registry quay.io", "quay.io", "org/app", "https"},
		}},
		{"secure.example/app", []ep{{"registry secure.example", "secure.example", "app", "https"}}},
	} {
		named, err := parseReference(tc.ref)
		if err != nil {
			t.Fatal(err)
		}
		eps, err := s.endpoints(named, nil)
		if err != nil {
			t.Fatalf("endpoints(%s): %v", tc.ref, err)
		}
		var got []ep
		for _, e := range eps {
			// Scheme "http" means insecure: HTTPS without verification first, then HTTP.
			got = append(got, ep{e.label, e.repo.RegistryStr(), e.repo.RepositoryStr(), e.repo.Scheme()})
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("endpoints(%s)\n got %v\nwant %v", tc.ref, got, tc.want)
		}
	}
	for _, bad := range []string{"ftp://m", "https://m/path", "https://user@m"} {
		if _, _, err := parseMirror(bad); err == nil {
			t.Errorf("parseMirror(%q) accepted", bad)
		}
	}
}

func TestPullWithBase64Auth(t *testing.T) {
	reg := registry.Start(t, registry.Options{Users: map[string]string{"bob": "pw"}})
	img := tim.Busybox(t)
	ref := reg.Host() + "/private:1"
	tim.Push(t, img, ref, remoteAuth("bob", "pw"))
	s := newTestStore(t, Options{})
	auth := &Auth{Auth: base64.StdEncoding.EncodeToString([]byte("bob:pw"))}
	if got, err := s.Pull(testContext(t), ref, auth); err != nil || got.ID != tim.ConfigDigest(t, img) {
		t.Fatalf("pull with a base64 auth: %s, %v", got.ID, err)
	}
}

// TestRemoveDuringPullDefersGC removes an image while a pull is running:
// the removal answers at once, the running pull is not disturbed, and the
// removed image's content goes when the pull ends.
func TestRemoveDuringPullDefersGC(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := push(t, reg, "slowish:1", tim.MultiLayer(t))
	px := startProxy(t, reg.Host())
	started := make(chan struct{}, 8)
	px.setTamper(func(_ string, body io.ReadCloser) io.ReadCloser {
		started <- struct{}{}
		return &pacedReader{ReadCloser: body}
	})
	s := newTestStore(t, Options{})
	old := importImages(t, s, map[string]v1.Image{"example.com/old:1": tim.Busybox(t, tim.WithCmd("old"))})[0]

	pulled := make(chan error, 1)
	go func() {
		_, err := s.Pull(testContext(t), px.host()+"/slowish:1", nil)
		pulled <- err
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the pull did not start downloading within 10s")
	}
	if err := s.Remove(old.ID); err != nil {
		t.Fatalf("remove during a pull: %v", err)
	}
	if !blobExists(s, old.ID) {
		t.Fatal("GC ran while a pull held the content lock")
	}
	if err := <-pulled; err != nil {
		t.Fatalf("pull during a removal: %v", err)
	}
	if blobExists(s, old.ID) {
		t.Fatal("the removed image's config is still there after the pull ended")
	}
	got, err := s.Get(px.host() + "/slowish:1")
	if err != nil || got.ID != p.configID {
		t.Fatalf("pulled image: %s, %v", got.ID, err)
	}
	for _, l := range got.Layers {
		if !blobExists(s, l.Digest) || !s.hasLayer(mustHash(t, l.ChainID)) {
			t.Fatalf("layer %s of the pulled image lost", l.Digest)
		}
	}
	if strings.Contains(strings.Join(dirNames(t, s.Root()), " "), gcPendingName) {
		t.Fatal("gc-pending marker left")
	}
}

// TestRegistryErrorKind: registry failures become the sentinels the server
// maps to gRPC codes, and with mirrors the registry's own failure decides.
func TestRegistryErrorKind(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://r/v2/", Err: &net.OpError{Op: "dial", Net: "tcp",
		Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}}
	ep := &endpoint{label: "registry r"}
	for _, tc := range []struct {
		name string
		err  error
		want error // nil: no sentinel
	}{
		{"401", &transport.Error{StatusCode: http.StatusUnauthorized}, ErrUnauthorized},
		{"403 wrapped", fmt.Errorf("get: %w", &transport.Error{StatusCode: http.StatusForbidden}), ErrUnauthorized},
		{"404 manifest unknown", &transport.Error{StatusCode: http.StatusNotFound}, ErrNotFound},
		{"503", &transport.Error{StatusCode: http.StatusServiceUnavailable}, ErrUnavailable},
		{"500", &transport.Error{StatusCode: http.StatusInternalServerError}, nil},
		{"no such host", &url.Error{Op: "Get", Err: &net.DNSError{Err: "no such host", Name: "r", IsNotFound: true}}, ErrNotFound},
		{"DNS server failure", &net.DNSError{Err: "server misbehaving", Name: "r", IsTemporary: true}, nil},
		{"name never looked up", &net.OpError{Op: "dial", Err: &net.AddrError{Err: "no suitable address found", Addr: "r.onion"}}, ErrNotFound},
		{"connection refused", refused, ErrUnavailable},
		{"dial timeout", &net.OpError{Op: "dial", Err: os.ErrDeadlineExceeded}, ErrUnavailable},
		{"the caller's deadline", fmt.Errorf("get: %w", context.DeadlineExceeded), nil},
		{"bad certificate", errors.New("tls: failed to verify certificate: x509: certificate signed by unknown authority"), nil},
		{"mirror down, registry refuses", endpointErrors{endpointError(&endpoint{label: "mirror m"}, refused),
			endpointError(ep, &transport.Error{StatusCode: http.StatusUnauthorized})}, ErrUnauthorized},
		{"mirror lacks it, registry down", endpointErrors{endpointError(&endpoint{label: "mirror m"}, &transport.Error{StatusCode: http.StatusNotFound}),
			endpointError(ep, refused)}, ErrUnavailable},
	} {
		err := endpointError(ep, tc.err)
		for _, sentinel := range []error{ErrUnauthorized, ErrNotFound, ErrUnavailable} {
			if got := errors.Is(err, sentinel); got != (sentinel == tc.want) {
				t.Errorf("%s: errors.Is(%v, %v) = %v", tc.name, err, sentinel, got)
			}
		}
		if !strings.Contains(err.Error(), "registry r") {
			t.Errorf("%s: %q does not name the endpoint", tc.name, err)
		}
	}
}

// Every reader of a blob hashes it (fetchBlob, streamLayer, the signature
// payload), so a blob comes as the registry sends it, not through the
// registry client's reader, which hashed each a second time: a tenth of a
// large pull's CPU went to sha256, half of it twice. The blob of a layer
// with a byte flipped reads to its end without an error here; the pull
// refuses it by the store's own digest (TestPullCorruptBlobKeepsNothing).
func TestBlobIsHashedByTheStoreAlone(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := push(t, reg, "once:1", tim.Busybox(t))
	px := startProxy(t, reg.Host())
	layers, err := p.img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	desc, err := partial.Descriptor(layers[0])
	if err != nil {
		t.Fatal(err)
	}
	px.setTamper(func(digest string, body io.ReadCloser) io.ReadCloser {
		if digest != desc.Digest.String() {
			return body
		}
		return &flipReader{ReadCloser: body, at: 1000}
	})
	s := newTestStore(t, Options{})
	named, err := parseReference(px.host() + "/once:1")
	if err != nil {
		t.Fatal(err)
	}
	src, stop, err := s.remoteSourceFor(named, nil, s.live.Load(), func(error) {})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	rc, err := src.blob(testContext(t), *desc)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, rc)
	rc.Close()
	if err != nil || n != desc.Size {
		t.Fatalf("read %d of %d bytes of the flipped blob, then %v: want all of it and no error (the store's hash is the one check)", n, desc.Size, err)
	}
}

// The registry's handshake (a ping, then its credentials or a token) is
// made once a pull, for the manifests and the blobs alike, although the
// blobs are asked for outside the registry client.
func TestPullShakesHandsOnce(t *testing.T) {
	reg := registry.Start(t, registry.Options{Users: map[string]string{"alice": "s3cret"}})
	img := tim.MultiLayer(t)
	tim.Push(t, img, reg.Host()+"/hands:1", remoteAuth("alice", "s3cret"))
	px := startProxy(t, reg.Host())
	s := newTestStore(t, Options{})
	got, err := s.Pull(testContext(t), px.host()+"/hands:1", &Auth{Username: "alice", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	if want := tim.ConfigDigest(t, img); got.ID != want {
		t.Fatalf("pulled %s, want %s", got.ID, want)
	}
	if n := px.pingCount(); n != 1 {
		t.Fatalf("a pull of %d blobs pinged the registry %d times, want once", len(px.gets()), n)
	}
}

// A registry may redirect a blob request to its blob store, but not into
// the node's own networks: a cloud's metadata service, a loopback port.
func TestRefuseInwardRedirect(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		refused  bool
	}{
		{"registry.example", "blobs.example", false},
		{"registry.example", "203.0.113.7", false},
		{"registry.example", "[2001:db8::1]", false},
		{"127.0.0.1", "127.0.0.1", false}, // the same host
		{"registry.example", "169.254.169.254", true},
		{"registry.example", "[fe80::1%25eth0]", true},
		{"registry.example", "10.1.2.3", true},
		{"registry.example", "192.168.0.1", true},
		{"registry.example", "[fd00::1]", true},
		{"registry.example", "[::ffff:169.254.169.254]", true},
		{"registry.example", "0.0.0.0", true},
		{"registry.example", "127.0.0.2", true},
		{"registry.example", "localhost", true},
		{"registry.example", "metadata.localhost", true},
		{"registry.example", "2852039166", true}, // 169.254.169.254 as one number
		{"registry.example", "0xa9.0xfe.0xa9.0xfe", true},
		{"127.0.0.1", "127.0.0.2", true},
	} {
		from, _ := http.NewRequest(http.MethodGet, "http://"+tc.from+"/v2/r/blobs/sha256:1", nil)
		to, err := http.NewRequest(http.MethodGet, "http://"+tc.to+"/b", nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.to, err)
		}
		err = refuseInwardRedirect(to, []*http.Request{from})
		if (err != nil) != tc.refused {
			t.Errorf("redirect from %s to %s: %v, want refused %v", tc.from, tc.to, err, tc.refused)
		}
	}
	from, _ := http.NewRequest(http.MethodGet, "http://registry.example/b", nil)
	if err := refuseInwardRedirect(from, slices.Repeat([]*http.Request{from}, maxRedirects)); err == nil {
		t.Errorf("redirect number %d followed, want refused", maxRedirects+1)
	}
}

// The attack end to end: a registry that redirects its blobs to another
// loopback address (where a node's own services listen) gets no request
// there, and the pull fails naming the redirect; a redirect within the
// registry's host is followed.
func TestPullFollowsNoRedirectInward(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := push(t, reg, "away:1", tim.Busybox(t))
	inward, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no listener on 127.0.0.2: %v", err)
	}
	t.Cleanup(func() { inward.Close() })
	var reached atomic.Int64
	go func() {
		for {
			c, err := inward.Accept()
			if err != nil {
				return
			}
			reached.Add(1)
			c.Close()
		}
	}()
	upstream := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: reg.Host()})
	for _, tc := range []struct {
		name    string
		to      func(srv string) string
		refused bool
	}{
		{"same host", func(srv string) string { return srv }, false},
		{"another loopback address", func(string) string { return inward.Addr().String() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var srv *httptest.Server
			srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, ok := blobDigest(r); ok && r.URL.Query().Get("moved") == "" {
					host := tc.to(strings.TrimPrefix(srv.URL, "http://"))
					http.Redirect(w, r, "http://"+host+r.URL.Path+"?moved=1", http.StatusTemporaryRedirect)
					return
				}
				upstream.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)
			s := newTestStore(t, Options{})
			got, err := s.Pull(testContext(t), strings.TrimPrefix(srv.URL, "http://")+"/away:1", nil)
			if !tc.refused {
				if err != nil || got.ID != p.configID {
					t.Fatalf("pull through a same-host redirect = %v, %v; want %s", got.ID, err, p.configID)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "redirect") {
				t.Fatalf("pull redirected to %s = %v, want refused naming the redirect", inward.Addr(), err)
			}
			if n := reached.Load(); n != 0 {
				t.Fatalf("%d connections reached %s", n, inward.Addr())
			}
			assertNoImage(t, s)
		})
	}
}

// A registry that announces more bytes for a blob than its descriptor
// declares is refused at the answer's header, before a byte of it is read
// or written, and nothing of the pull is kept.
func TestBlobLongerThanItsDescriptorIsRefusedAtTheHeader(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	push(t, reg, "long:1", tim.Busybox(t))
	upstream := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: reg.Host()})
	const extra = 64 << 20
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := blobDigest(r); !ok || r.Method != http.MethodGet {
			upstream.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(extra))
		w.WriteHeader(http.StatusOK)
		chunk := make([]byte, 32<<10)
		for n := 0; n < extra; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			sent.Add(int64(len(chunk)))
		}
	}))
	t.Cleanup(srv.Close)
	s := newTestStore(t, Options{})
	_, err := s.Pull(testContext(t), strings.TrimPrefix(srv.URL, "http://")+"/long:1", nil)
	if want := fmt.Sprintf("the registry sends %d bytes, the descriptor says", extra); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("pull of a blob announced at %d bytes = %v, want refused at the header (%q)", extra, err, want)
	}
	if n := sent.Load(); n >= extra {
		t.Errorf("the registry sent all %d bytes: the answer was read past its header", n)
	}
	assertNoImage(t, s)
}
