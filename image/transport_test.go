package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minicri/minicri/test/registry"
)

// The attack: a registry serving a 90 MiB manifest, which the registry
// client would read up to its own 100 MiB before the 4 MiB cap is checked.
// The body stops at the cap, with or without a Content-Length, and the pull
// fails with ErrTooLarge (ResourceExhausted) naming the manifest.
func TestOversizeManifestIsReadOnlyToTheCap(t *testing.T) {
	for _, withLength := range []bool{false, true} {
		t.Run("content-length="+strconv.FormatBool(withLength), func(t *testing.T) {
			const size = 90 << 20
			srv := registry.ServeManifests(t, func(w http.ResponseWriter, r *http.Request, out io.Writer) {
				w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
				if withLength {
					w.Header().Set("Content-Length", strconv.Itoa(size))
				}
				registry.WriteHugeManifest(out, size)
			})
			s := newTestStore(t, Options{})
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := s.Pull(testContext(t), srv.Ref("big"), nil)
			runtime.ReadMemStats(&after)
			allocated := int64(after.TotalAlloc - before.TotalAlloc)
			t.Logf("pull: %v; %d KiB sent, %d KiB allocated", err, srv.Sent.Load()>>10, allocated>>10)
			if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "manifest big") || !strings.Contains(err.Error(), "4194304 bytes allowed") {
				t.Fatalf("pull of a 90 MiB manifest = %v, want ErrTooLarge naming the manifest and the cap", err)
			}
			// The socket buffers hold a few MiB more than the client read.
			if sent := srv.Sent.Load(); sent > maxManifestSize+16<<20 {
				t.Errorf("the registry got %d MiB of the manifest out, want about the %d MiB cap", sent>>20, maxManifestSize>>20)
			}
			if allocated > 48<<20 {
				t.Errorf("the pull allocated %d MiB for a manifest capped at %d MiB", allocated>>20, maxManifestSize>>20)
			}
			assertNoImage(t, s)
		})
	}
}

// A manifest list's child is read up to the size its descriptor declares;
// one that declares more than the cap is not asked for at all.
func TestChildManifestIsReadOnlyToItsDeclaredSize(t *testing.T) {
	body := `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","pad":"` + strings.Repeat("b", 1<<20) + `"}`
	sum := sha256.Sum256([]byte(body))
	child := "sha256:" + hex.EncodeToString(sum[:])
	for _, tc := range []struct {
		name     string
		declared int64
		want     string
		asked    int64 // manifest requests: the index, and the child or not
	}{
		{"declares less than it is", 300, "more than the 300 bytes its descriptor declares", 2},
		{"declares more than the cap", 90 << 20, "its descriptor declares 94371840 bytes", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			index := fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":%d,"platform":{"os":"linux","architecture":%q}}]}`,
				child, tc.declared, runtime.GOARCH)
			srv := registry.ServeManifests(t, func(w http.ResponseWriter, r *http.Request, out io.Writer) {
				if strings.HasSuffix(r.URL.Path, "/list") {
					w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
					io.WriteString(out, index)
					return
				}
				w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
				io.WriteString(out, body)
			})
			s := newTestStore(t, Options{})
			_, err := s.Pull(testContext(t), srv.Ref("list"), nil)
			t.Logf("pull: %v; %d KiB sent", err, srv.Sent.Load()>>10)
			if err == nil || !strings.Contains(err.Error(), "manifest "+child) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("pull = %v, want an error naming the child manifest and saying %q", err, tc.want)
			}
			if got := srv.Requests.Load(); got != tc.asked {
				t.Errorf("%d manifest requests, want %d", got, tc.asked)
			}
			assertNoImage(t, s)
		})
	}
}

// A manifest answer that stalls, before its headers or half-way through
// its body, ends the pull by the progress timeout (pull_progress_timeout),
// not the pull timeout: Unavailable, naming the manifest. Before, only
// layers were watched and such a pull waited for image.pull_timeout.
func TestStalledManifestEndsByTheProgressTimeout(t *testing.T) {
	for _, headers := range []bool{false, true} {
		t.Run("headers sent="+strconv.FormatBool(headers), func(t *testing.T) {
			release := make(chan struct{})
			srv := registry.ServeManifests(t, func(w http.ResponseWriter, r *http.Request, out io.Writer) {
				if headers {
					w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
					io.WriteString(out, `{"schemaVersion":2,`)
					w.(http.Flusher).Flush()
				}
				select {
				case <-r.Context().Done():
				case <-release:
				}
			})
			defer close(release)
			window := time.Second
			s := newTestStore(t, Options{PullProgress: ProgressLimit{Window: window, MinRate: 1024}, PullTimeout: 2 * time.Minute})
			start := time.Now()
			ctx, cancel := context.WithTimeout(testContext(t), time.Minute)
			defer cancel()
			_, err := s.Pull(ctx, srv.Ref("slow"), nil)
			took := time.Since(start)
			t.Logf("after %v: %v", took.Round(time.Millisecond), err)
			var stall *StalledError
			if !errors.As(err, &stall) || !errors.Is(err, ErrUnavailable) || stall.What != "manifest" || stall.Name != "slow" {
				t.Fatalf("pull = %v, want a *StalledError of manifest slow (ErrUnavailable)", err)
			}
			if took > window+20*time.Second {
				t.Errorf("the pull failed after %v, want soon after the %v window", took, window)
			}
		})
	}
}

// roundTripRecorder is a transport that answers 200 and records the URLs.
type roundTripRecorder struct{ urls []string }

func (r *roundTripRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.urls = append(r.urls, req.URL.String())
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

// Plain HTTP goes only to loopback registries unless one is configured
// insecure, as containerd does. Before, the registry client fell back to
// HTTP for private addresses (10/8, 172.16/12, 192.168/16) and *.localhost
// names too, so whoever sat on the network path could answer the pull.
// Hosts other than the registry (its token service) are its own choice.
func TestPlainHTTPOnlyToLoopback(t *testing.T) {
	for _, tc := range []struct {
		registry, url string
		allowed       bool
	}{
		{"127.0.0.1:5000", "http://127.0.0.1:5000/v2/", true},
		{"127.8.9.10:5000", "http://127.8.9.10:5000/v2/", true},
		{"[::1]:5000", "http://[::1]:5000/v2/", true},
		{"localhost:5000", "http://localhost:5000/v2/", true},
		{"LOCALHOST.", "http://LOCALHOST./v2/", true},
		{"registry.localhost:5000", "http://registry.localhost:5000/v2/", true},
		{"10.0.0.5:5000", "https://10.0.0.5:5000/v2/", true},
		{"registry.example", "https://registry.example/v2/", true},
		{"registry.example", "http://auth.example/token", true},
		{"10.0.0.5:5000", "http://10.0.0.5:5000/v2/", false},
		{"172.16.1.1", "http://172.16.1.1/v2/", false},
		{"192.168.1.10:5000", "http://192.168.1.10:5000/v2/", false},
		{"registry.local:5000", "http://registry.local:5000/v2/", false},
		{"localhost.example", "http://localhost.example/v2/", false},
		{"[fd00::1]:5000", "http://[fd00::1]:5000/v2/", false},
		{"[::ffff:10.0.0.5]:5000", "http://[::ffff:10.0.0.5]:5000/v2/", false},
		{"registry.example", "http://registry.example/v2/", false},
	} {
		rec := &roundTripRecorder{}
		req, err := http.NewRequest(http.MethodGet, tc.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = httpsOnly{registry: tc.registry, inner: rec}.RoundTrip(req)
		if sent := len(rec.urls) == 1; sent != tc.allowed || (err == nil) != tc.allowed {
			t.Errorf("%s for registry %s: sent %v, err %v; want sent %v", tc.url, tc.registry, sent, err, tc.allowed)
		}
		if err != nil && !strings.Contains(err.Error(), "insecure = true") {
			t.Errorf("%s: error %q does not say how to allow it", tc.url, err)
		}
	}
}

// The pull itself: a plain-HTTP registry on a private address is refused
// without insecure = true, with an error that says how to allow it, and is
// reached once it is configured insecure. The "private address" is a
// loopback listener behind a transport that dials it for 10.99.0.1:PORT.
func TestPullRefusesPlainHTTPToPrivateAddress(t *testing.T) {
	srv, host, dialLoopback := privateAddressRegistry(t)
	for _, insecure := range []bool{false, true} {
		opts := Options{}
		if insecure {
			opts.Registries = map[string]RegistryConfig{host: {Insecure: true}}
		}
		s := newTestStore(t, opts)
		s.secureTransport, s.insecureTransport = dialLoopback(newTransport(false)), dialLoopback(newTransport(true))
		srv.Requests.Store(0)
		_, err := s.Pull(testContext(t), host+"/m:v1", nil)
		t.Logf("insecure %v: %v", insecure, err)
		if !insecure && (err == nil || !strings.Contains(err.Error(), "plain HTTP to "+host+" refused") || srv.Requests.Load() != 0) {
			t.Errorf("pull from plain HTTP on %s = %v (%d manifest requests); want refused, naming insecure = true", host, err, srv.Requests.Load())
		}
		if insecure && (!errors.Is(err, ErrNotFound) || srv.Requests.Load() == 0) {
			t.Errorf("pull from %s configured insecure = %v (%d manifest requests); want the registry's not found", host, err, srv.Requests.Load())
		}
	}
}

// A hosts.toml keeps the rule: a private address is reached over plain HTTP
// only where the file writes http:// itself, not for a file that merely
// exists (here with a header, whose transport wraps the shared one).
func TestHostsTOMLKeepsPlainHTTPRule(t *testing.T) {
	srv, host, dialLoopback := privateAddressRegistry(t)
	for _, explicit := range []bool{false, true} {
		dir := t.TempDir()
		file := "[header]\n  x-a = \"1\"\n"
		if explicit {
			file = "server = \"http://" + host + "\"\n" + file
		}
		if err := os.MkdirAll(filepath.Join(dir, host), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, host, "hosts.toml"), []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		s := newTestStore(t, Options{RegistryConfigPath: dir})
		s.secureTransport, s.insecureTransport = dialLoopback(newTransport(false)), dialLoopback(newTransport(true))
		srv.Requests.Store(0)
		_, err := s.Pull(testContext(t), host+"/m:v1", nil)
		if !explicit && (err == nil || !strings.Contains(err.Error(), "plain HTTP to "+host+" refused") || srv.Requests.Load() != 0) {
			t.Errorf("hosts.toml without http://: pull = %v (%d manifest requests); want refused", err, srv.Requests.Load())
		}
		if explicit && (!errors.Is(err, ErrNotFound) || srv.Requests.Load() == 0) {
			t.Errorf("hosts.toml with server http://: pull = %v (%d manifest requests); want the registry's not found", err, srv.Requests.Load())
		}
	}
}

// privateAddressRegistry serves manifests (all not found) on loopback, as
// if on 10.99.0.1:PORT (host): dialLoopback makes a transport of
// newTransport dial it there.
func privateAddressRegistry(t *testing.T) (srv *registry.ManifestServer, host string, dialLoopback func(http.RoundTripper) http.RoundTripper) {
	srv = registry.ServeManifests(t, func(w http.ResponseWriter, r *http.Request, out io.Writer) { http.NotFound(w, r) })
	_, port, _ := strings.Cut(srv.Host(), ":")
	return srv, "10.99.0.1:" + port, func(base http.RoundTripper) http.RoundTripper {
		base.(limitedBodies).inner.(*http.Transport).DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, "127.0.0.1:"+port)
		}
		return base
	}
}
