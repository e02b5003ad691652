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
	"net/netip"
	"net/url"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sirupsen/logrus"
)

// retryBackoff retries a failed request twice, soon: a registry that is down
// should fail the pull (or move it to the next endpoint) within seconds.
var retryBackoff = remote.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 3}

const userAgent = "minicri"

// endpoint is one place to pull a repository from: a mirror or the registry.
type endpoint struct {
	label string // "mirror http://127.0.0.1:5001", "registry docker.io"
	repo  name.Repository
	// The host's transport and credentials, before the registry's
	// handshake (connect).
	transport http.RoundTripper
	auth      authn.Authenticator
	// resolve: may be asked for a manifest by tag; pull: for a manifest
	// by digest and for blobs (hosts.toml capabilities; both by default).
	resolve, pull bool

	mu   sync.Mutex
	conn *registryConn // made at the endpoint's first request
}

// registryConn is what an endpoint's handshake with its registry (a ping,
// then a token where the registry asks for one) gives: made once, for the
// manifests the registry client fetches and the blobs minicri asks for
// itself alike.
type registryConn struct {
	puller *remote.Puller
	// blobs: the store hashes every blob it reads, so it asks for them
	// itself; the registry client's blob reader would hash each a second
	// time.
	blobs *http.Client
}

// connect makes the endpoint's registryConn, once; a failed handshake is
// tried again by the next request.
func (ep *endpoint) connect(ctx context.Context) (*registryConn, error) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.conn != nil {
		return ep.conn, nil
	}
	t := transport.NewRetry(ep.transport,
		transport.WithRetryBackoff(retryBackoff),
		transport.WithRetryPredicate(retryableError),
		transport.WithRetryStatusCodes(retryStatusCodes...))
	t = transport.NewUserAgent(t, userAgent)
	// A *transport.Wrapper is the registry client's sign that the
	// handshake is done and the transport needs no more wrapping.
	authed, err := transport.NewWithContext(ctx, ep.repo.Registry, ep.auth, t, []string{ep.repo.Scope(transport.PullScope)})
	if err != nil {
		return nil, err
	}
	puller, err := remote.NewPuller(remote.WithTransport(authed))
	if err != nil {
		return nil, err
	}
	ep.conn = &registryConn{puller: puller, blobs: &http.Client{Transport: authed, CheckRedirect: refuseInwardRedirect}}
	return ep.conn, nil
}

// retryStatusCodes are the answers worth asking again for: the registry
// or a proxy before it timed out, was overloaded or failed for now.
var retryStatusCodes = []int{
	http.StatusRequestTimeout,
	http.StatusTooManyRequests,
	http.StatusInternalServerError,
	http.StatusBadGateway,
	http.StatusServiceUnavailable,
	http.StatusGatewayTimeout,
}

// retryableError: a request that failed on the network's account (a
// connection reset, closed or cut short, a timeout) is made again.
func retryableError(err error) bool {
	var netErr net.Error
	return (errors.As(err, &netErr) && netErr.Timeout()) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}

// endpoints lists the mirrors of the reference's registry, in order, then
// the registry itself. Credentials go to the registry only: a mirror is
// another host, and the kubelet's credentials are for the registry.
func (s *Store) endpoints(ref reference, auth *Auth) ([]*endpoint, error) {
	live := s.live.Load()
	auth, err := nodeAuth(live.AuthFile, ref.host, auth)
	if err != nil {
		return nil, err
	}
	hosts, err := loadHosts(live.RegistryConfigPath, ref.host)
	if err != nil {
		return nil, err
	}
	cfg, explicit, err := registryConfig(live.Registries, ref.host)
	if err != nil {
		return nil, err
	}
	if hosts != nil && explicit {
		// The host's own hosts.toml wins over [image.registries], which
		// wins over _default's.
		if filepath.Base(filepath.Dir(hosts.file)) == defaultHostDir {
			hosts = nil
		} else {
			s.log.WithField("file", hosts.file).Warnf("image.registries.%q is ignored: the registry's hosts.toml wins", ref.host)
		}
	}
	if hosts != nil {
		return s.hostsEndpoints(ref, hosts, auth)
	}
	var eps []*endpoint
	for _, m := range cfg.Mirrors {
		host, plainHTTP, err := parseMirror(m)
		if err != nil {
			return nil, err
		}
		mcfg, _, err := registryConfig(live.Registries, host)
		if err != nil {
			return nil, err
		}
		insecure := plainHTTP || mcfg.Insecure
		ep, err := s.newEndpoint("mirror "+m, host, ref.path, insecure, authn.Anonymous)
		if err != nil {
			return nil, err
		}
		eps = append(eps, ep)
	}
	ep, err := s.newEndpoint("registry "+ref.host, ref.host, ref.path, cfg.Insecure, authenticator(auth))
	if err != nil {
		return nil, err
	}
	return append(eps, ep), nil
}

// registryConfig finds a host's [image.registries] configuration, and
// whether it has one, whichever spelling of the host its key is (hostKey);
// two keys that name one registry are an error, not a choice.
func registryConfig(regs map[string]RegistryConfig, host string) (RegistryConfig, bool, error) {
	want := hostKey(host)
	var found string
	for key := range regs {
		if want == "" || hostKey(key) != want {
			continue
		}
		if found != "" {
			return RegistryConfig{}, false, fmt.Errorf("image.registries: %q and %q name the same registry %s", min(found, key), max(found, key), want)
		}
		found = key
	}
	if found == "" {
		return RegistryConfig{}, false, nil
	}
	return regs[found], true, nil
}

// hostKey is the one spelling (canonicalHost) of a registry host written in
// configuration or a reference, Docker Hub's two names one; "" for what
// names no host a reference can name.
func hostKey(host string) string {
	h, err := canonicalHost(host)
	if err != nil {
		return ""
	}
	return displayHost(h)
}

// hostsEndpoints are the endpoints of a registry's hosts.toml: its mirrors
// in order, then its server. Credentials go to the server only.
func (s *Store) hostsEndpoints(ref reference, hc *hostsConfig, auth *Auth) ([]*endpoint, error) {
	var eps []*endpoint
	for _, h := range hc.mirrors {
		ep, err := s.hostEndpoint("mirror "+h.url.Scheme+"://"+h.url.Host, h, ref.path, authn.Anonymous)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", hc.file, err)
		}
		eps = append(eps, ep)
	}
	ep, err := s.hostEndpoint("registry "+ref.host, hc.server, ref.path, authenticator(auth))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", hc.file, err)
	}
	return append(eps, ep), nil
}

// hostEndpoint is one host of a hosts.toml. Plain HTTP only where the
// file wrote http://, or to loopback (as without a hosts.toml).
func (s *Store) hostEndpoint(label string, h hostEndpoint, path string, auth authn.Authenticator) (*endpoint, error) {
	var opts []name.Option
	if h.url.Scheme == "http" {
		opts = append(opts, name.Insecure)
	}
	reg, err := name.NewRegistry(h.url.Host, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	host := reg.RegistryStr() // what requests name: docker.io is index.docker.io
	var t http.RoundTripper = s.secureTransport
	if h.tls != nil {
		t = limitedBodies{s.hostTransports.get(h.tlsKey, h.tls)}
	}
	if h.header != nil || h.url.Path != "/v2" {
		// limitedBodies stays outermost: it reads the request's context.
		inner := t
		if lb, ok := t.(limitedBodies); ok {
			inner = lb.inner
		}
		t = limitedBodies{hostRequests{host: host, root: h.url.Path, header: h.header, inner: inner}}
	}
	if h.url.Scheme != "http" {
		t = httpsOnly{registry: host, inner: t}
	}
	return &endpoint{label: label, repo: reg.Repo(path), transport: t, auth: auth, resolve: h.resolve, pull: h.pull}, nil
}

// parseMirror reads "http://host:port", "https://host:port" or "host:port".
func parseMirror(m string) (host string, plainHTTP bool, err error) {
	if !strings.Contains(m, "://") {
		m = "https://" + m
	}
	u, err := url.Parse(m)
	if err != nil {
		return "", false, fmt.Errorf("mirror %q: %w", m, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", false, fmt.Errorf("mirror %q: scheme must be http or https", m)
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", false, fmt.Errorf("mirror %q: want [http[s]://]host[:port] and nothing more", m)
	}
	return u.Host, u.Scheme == "http", nil
}

func (s *Store) newEndpoint(label, host, path string, insecure bool, auth authn.Authenticator) (*endpoint, error) {
	var opts []name.Option
	t := http.RoundTripper(httpsOnly{registry: host, inner: s.secureTransport})
	if insecure {
		// Insecure: HTTPS without verification, or plain HTTP.
		opts = append(opts, name.Insecure)
		t = s.insecureTransport
	}
	reg, err := name.NewRegistry(host, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	return &endpoint{label: label, repo: reg.Repo(path), transport: t, auth: auth, resolve: true, pull: true}, nil
}

func authenticator(a *Auth) authn.Authenticator {
	if a == nil || *a == (Auth{}) {
		return authn.Anonymous
	}
	return authn.FromConfig(authn.AuthConfig{
		Username:      a.Username,
		Password:      a.Password,
		Auth:          a.Auth,
		IdentityToken: a.IdentityToken,
		RegistryToken: a.RegistryToken,
	})
}

// remoteSource fetches one pull's manifests and blobs over its endpoints.
// Blobs are asked first of the endpoint that served the manifest, then of
// the ones after it.
type remoteSource struct {
	eps      []*endpoint
	first    int           // set while resolving manifests, before any blob is fetched
	progress *pullProgress // watches the manifest downloads too (nil: not)
	log      logrus.FieldLogger
}

// manifest is a fetched manifest (or index) and its digest.
type manifest struct {
	raw       []byte
	mediaType types.MediaType
	digest    v1.Hash
}

// manifest fetches the manifest named by a tag or a digest. Its body is
// read through a readLimit: at most maxManifestSize bytes, or declared
// when a manifest list's descriptor declared a size (0: none), so that a
// registry that sends 90 MiB costs what the bound allows, not what the
// registry client would read (100 MiB, then refused).
func (r *remoteSource) manifest(ctx context.Context, identifier string, declared int64) (manifest, error) {
	limit := readLimit{what: "manifest " + identifier, max: maxManifestSize}
	if declared > maxManifestSize {
		return manifest{}, limit.tooLarge(fmt.Sprintf("its descriptor declares %d bytes, which", declared))
	}
	if declared > 0 {
		limit.max, limit.declared = declared, true
	}
	return r.manifestWithin(ctx, identifier, limit)
}

// manifestWithin fetches a manifest whose body is read through limit.
func (r *remoteSource) manifestWithin(ctx context.Context, identifier string, limit readLimit) (manifest, error) {
	byDigest := strings.HasPrefix(identifier, "sha256:")
	var errs []error
	for i := r.first; i < len(r.eps); i++ {
		ep := r.eps[i]
		if (byDigest && !ep.pull) || (!byDigest && !ep.resolve) {
			continue
		}
		desc, err := r.get(ctx, ep, identifier, limit)
		if err == nil {
			r.first = i
			return checkManifest(desc, identifier)
		}
		if ctx.Err() != nil {
			return manifest{}, ctx.Err()
		}
		errs = append(errs, endpointError(ep, err))
		if i < len(r.eps)-1 {
			r.log.WithError(err).WithField("endpoint", ep.label).Info("pull: endpoint failed, trying the next")
		}
	}
	if len(errs) == 0 {
		return manifest{}, fmt.Errorf("manifest %s: no host of the registry has the capability (hosts.toml capabilities)", identifier)
	}
	return manifest{}, joinErrors(errs)
}

// get is one endpoint's answer for a manifest, under the pull's progress
// check from the request on (the endpoint's first request pings the
// registry and fetches a token first: connect).
func (r *remoteSource) get(ctx context.Context, ep *endpoint, identifier string, limit readLimit) (desc *remote.Descriptor, err error) {
	watch := r.progress.begin(manifestDownload, identifier, limit.max)
	defer func() { r.progress.end(watch, err) }()
	if watch != nil {
		limit.counted = watch
	}
	ctx = withReadLimit(ctx, limit)
	conn, err := ep.connect(ctx)
	if err != nil {
		return nil, err
	}
	return conn.puller.Get(ctx, refIn(ep.repo, identifier))
}

func refIn(repo name.Repository, identifier string) name.Reference {
	if strings.HasPrefix(identifier, "sha256:") {
		return repo.Digest(identifier)
	}
	return repo.Tag(identifier)
}

// checkManifest verifies what the registry sent: its size (its reader
// stopped at the bound already), and its digest when a digest named it.
func checkManifest(desc *remote.Descriptor, identifier string) (manifest, error) {
	if len(desc.Manifest) > maxManifestSize {
		return manifest{}, fmt.Errorf("manifest %s of %d bytes is larger than the %d allowed: %w", identifier, len(desc.Manifest), maxManifestSize, ErrTooLarge)
	}
	sum := sha256.Sum256(desc.Manifest)
	d := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	if strings.HasPrefix(identifier, "sha256:") && d.String() != identifier {
		return manifest{}, fmt.Errorf("manifest %s hashes to %s: %w", identifier, d, ErrDigestMismatch)
	}
	return manifest{raw: desc.Manifest, mediaType: desc.MediaType, digest: d}, nil
}

// blob opens a blob stream from the first endpoint that has it. Whoever
// reads it checks its size and digest.
func (r *remoteSource) blob(ctx context.Context, desc v1.Descriptor) (io.ReadCloser, error) {
	return r.blobFrom(ctx, desc, 0)
}

// blobFrom opens a blob's content from offset on, past 0 with an HTTP
// range request: how a download whose connection broke continues. A
// registry that ignores the range (200, the whole blob) is read past the
// bytes already had; the caller hashes the whole blob either way.
func (r *remoteSource) blobFrom(ctx context.Context, desc v1.Descriptor, offset int64) (io.ReadCloser, error) {
	return r.firstBlob(ctx, desc, func(ep *endpoint) (io.ReadCloser, error) {
		return ep.blobFrom(ctx, desc, offset)
	})
}

// firstBlob is the first endpoint's blob stream that open gets, in the
// order blobs are asked for.
func (r *remoteSource) firstBlob(ctx context.Context, desc v1.Descriptor, open func(*endpoint) (io.ReadCloser, error)) (io.ReadCloser, error) {
	var errs []error
	for i := r.first; i < len(r.eps); i++ {
		ep := r.eps[i]
		if !ep.pull {
			continue
		}
		rc, err := open(ep)
		if err == nil {
			return rc, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		errs = append(errs, endpointError(ep, err))
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("blob %s: no host of the registry has the pull capability (hosts.toml capabilities)", desc.Digest)
	}
	return nil, joinErrors(errs)
}

func (ep *endpoint) blobFrom(ctx context.Context, desc v1.Descriptor, offset int64) (io.ReadCloser, error) {
	conn, err := ep.connect(ctx)
	if err != nil {
		return nil, err
	}
	reg := ep.repo.Registry
	u := url.URL{Scheme: reg.Scheme(), Host: reg.RegistryStr(), Path: "/v2/" + ep.repo.RepositoryStr() + "/blobs/" + desc.Digest.String()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if offset > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", offset))
	}
	resp, err := conn.blobs.Do(req)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusPartialContent && offset > 0:
		var start int64
		if _, err := fmt.Sscanf(resp.Header.Get("Content-Range"), "bytes %d-", &start); err != nil || start != offset {
			resp.Body.Close()
			return nil, fmt.Errorf("blob %s: asked for bytes from %d, got Content-Range %q", desc.Digest, offset, resp.Header.Get("Content-Range"))
		}
		return resp.Body, nil
	case resp.StatusCode == http.StatusOK:
		if resp.ContentLength > desc.Size {
			resp.Body.Close()
			return nil, fmt.Errorf("blob %s: the registry sends %d bytes, the descriptor says %d", desc.Digest, resp.ContentLength, desc.Size)
		}
		if _, err := io.CopyN(io.Discard, resp.Body, offset); err != nil {
			resp.Body.Close()
			return nil, fmt.Errorf("blob %s: skip the %d bytes already had: %w", desc.Digest, offset, err)
		}
		return resp.Body, nil
	}
	defer resp.Body.Close()
	if offset > 0 {
		return nil, transport.CheckError(resp, http.StatusPartialContent, http.StatusOK)
	}
	return nil, transport.CheckError(resp, http.StatusOK)
}

// maxRedirects is how many redirects one blob request follows (as many as
// Go's HTTP client does by default).
const maxRedirects = 10

// refuseInwardRedirect stops a registry from sending the node's blob
// requests into the node's own networks: a redirect to another host that
// is a loopback name or a loopback, private, link-local or unspecified
// address (a cloud's metadata service among them) is refused. The blob's
// digest would refuse what came back, but the request would have been
// made, with whatever it does there. A registry's blob store is a host on
// the registry's side: a name, or a public address.
func refuseInwardRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("blob request: more than %d redirects", maxRedirects)
	}
	from, to := via[0].URL.Hostname(), req.URL.Hostname()
	if to != from && isInwardHost(to) {
		return fmt.Errorf("blob request: redirect from %s to %s refused: a registry may not send the node to its own networks", from, to)
	}
	return nil
}

// isInwardHost: a loopback name, an address that is not a public one, or
// a host spelled only in numbers some other way (0x7f.1, 2130706433),
// which some resolvers take for an address.
func isInwardHost(host string) bool {
	if isLoopbackHost(host) {
		return true
	}
	host, _, _ = strings.Cut(host, "%")
	if addr, err := netip.ParseAddr(host); err == nil {
		addr = addr.Unmap()
		return addr.IsLoopback() || addr.IsPrivate() || addr.IsLinkLocalUnicast() ||
			addr.IsLinkLocalMulticast() || addr.IsUnspecified()
	}
	for _, part := range strings.Split(host, ".") {
		if _, err := strconv.ParseUint(part, 0, 32); err != nil {
			return false
		}
	}
	return true
}

// endpointError names the endpoint, and marks the failures a caller can act
// on: refused credentials, an image or host that does not exist, a registry
// that is down.
func endpointError(ep *endpoint, err error) error {
	if kind := registryErrorKind(err); kind != nil {
		return fmt.Errorf("%s: %w: %w", ep.label, kind, err)
	}
	return fmt.Errorf("%s: %w", ep.label, err)
}

// registryErrorKind tells which sentinel a registry failure is, or nil.
func registryErrorKind(err error) error {
	if isContextError(err) {
		return nil // the caller's deadline or cancel, not the registry's doing
	}
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch terr.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return ErrUnauthorized
		case http.StatusNotFound:
			return ErrNotFound // MANIFEST_UNKNOWN, NAME_UNKNOWN, BLOB_UNKNOWN
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests:
			return ErrUnavailable
		}
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return ErrNotFound
	}
	// What the resolver answers for a name it must not look up (.onion), or
	// one with no address of a usable family: no such host either.
	var addrErr *net.AddrError
	if errors.As(err, &addrErr) && addrErr.Err == "no suitable address found" {
		return ErrNotFound
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return ErrUnavailable
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return ErrUnavailable
	}
	return nil
}

// endpointErrors is the failure of every endpoint, on one line.
type endpointErrors []error

func (e endpointErrors) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap is the registry's own failure (the last endpoint): it decides what
// kind of failure the pull is. A mirror that lacks the image or is down does
// not make a pull that the registry refused for its credentials "not found".
func (e endpointErrors) Unwrap() error { return e[len(e)-1] }

func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return endpointErrors(errs)
}

// wantPlatform is the platform picked from manifest lists.
func wantPlatform() v1.Platform {
	p := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	if runtime.GOARCH == "arm64" {
		p.Variant = "v8"
	}
	return p
}

// choosePlatform picks the manifest of want from an index; a matching
// variant beats an unspecified one.
func choosePlatform(idx *v1.IndexManifest, want v1.Platform) (v1.Descriptor, error) {
	best, bestScore := -1, 0
	var seen []string
	for i, m := range idx.Manifests {
		if m.Platform == nil {
			continue
		}
		p := m.Platform
		seen = append(seen, platformString(p.OS, p.Architecture, p.Variant))
		if p.OS != want.OS || p.Architecture != want.Architecture {
			continue
		}
		score := 1
		if p.Variant == want.Variant {
			score = 2
		} else if p.Variant != "" && want.Variant != "" {
			continue
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	if best < 0 {
		return v1.Descriptor{}, fmt.Errorf("no image for %s in the manifest list (it has %s)",
			platformString(want.OS, want.Architecture, want.Variant), strings.Join(seen, ", "))
	}
	return idx.Manifests[best], nil
}
