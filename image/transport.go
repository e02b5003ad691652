package image

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// newTransport is the HTTP transport of every pull of one kind (secure or
// insecure), shared so that connections are reused. Both bound the bodies
// that a pull reads into memory (readLimit).
func newTransport(insecure bool) http.RoundTripper {
	t := remote.DefaultTransport.(*http.Transport).Clone()
	if insecure {
		t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the registry is configured insecure
	}
	return limitedBodies{t}
}

// httpsOnly refuses plain HTTP to one registry host unless it is loopback.
// The registry client falls back from HTTPS to HTTP for registries on
// private addresses (10/8, 172.16/12, 192.168/16) and *.localhost names,
// where anyone on the network path could then serve the node any image;
// containerd falls back for loopback only (localhost, 127.0.0.0/8, ::1),
// and so does minicri. A registry or mirror reached over HTTP elsewhere
// says so: `insecure = true`, or a mirror written http://host:port. Other
// hosts the registry sends the client to (its token service, a blob
// store it redirects to) are the registry's choice, as with containerd,
// but for the node's own networks (refuseInwardRedirect).
type httpsOnly struct {
	registry string // host[:port] as in the reference
	inner    http.RoundTripper
}

func (t httpsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && req.URL.Host == t.registry && !isLoopbackHost(req.URL.Hostname()) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("plain HTTP to %s refused: only loopback registries are reached over HTTP unless configured (image.registries.%q with insecure = true, a mirror written http://%s, or http:// in its hosts.toml)",
			req.URL.Host, req.URL.Host, req.URL.Host)
	}
	return t.inner.RoundTrip(req)
}

// isLoopbackHost: "localhost" (and names under it, which resolvers keep on
// loopback: RFC 6761), 127.0.0.0/8, ::1.
func isLoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// readLimit bounds one response body that a pull reads into memory: a
// manifest, whose client would read up to 100 MiB of it. max is the least
// of the cap and the size its descriptor declares; counted (may be nil) is
// told every byte, for the stall check.
type readLimit struct {
	what     string // "manifest latest", "manifest sha256:…"
	max      int64
	declared bool // max is the size the descriptor declares, not the cap
	counted  io.Writer
}

type readLimitKey struct{}

// withReadLimit makes the response bodies of the requests made with ctx
// stop at l.max bytes: one more is an error, and a declared Content-Length
// over it is refused before a byte is read.
func withReadLimit(ctx context.Context, l readLimit) context.Context {
	return context.WithValue(ctx, readLimitKey{}, l)
}

// limitedBodies applies the readLimit of a request's context to the body
// of its answer. Only successful answers: an error's body the registry
// client reads up to 64 KiB itself.
type limitedBodies struct{ inner http.RoundTripper }

func (t limitedBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.inner.RoundTrip(req)
	l, ok := req.Context().Value(readLimitKey{}).(readLimit)
	if err != nil || !ok || resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp, err
	}
	if resp.ContentLength > l.max {
		resp.Body.Close()
		return nil, l.tooLarge(fmt.Sprintf("%d bytes", resp.ContentLength))
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, limit: l, left: l.max}
	return resp, nil
}

func (l readLimit) tooLarge(size string) error {
	if l.declared {
		return fmt.Errorf("%s: %s is more than the %d bytes its descriptor declares", l.what, size, l.max)
	}
	return fmt.Errorf("%s: %s is more than the %d bytes allowed: %w", l.what, size, l.max, ErrTooLarge)
}

type limitedBody struct {
	io.ReadCloser
	limit readLimit
	left  int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, b.limit.tooLarge("its body")
	}
	// Read one byte past the limit at most, to see whether there is one.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	if n > 0 && b.limit.counted != nil {
		_, _ = b.limit.counted.Write(p[:n])
	}
	if b.left -= int64(n); b.left < 0 {
		return 0, b.limit.tooLarge("its body")
	}
	return n, err
}
