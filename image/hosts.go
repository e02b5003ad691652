package image

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// A registry's host configuration in containerd's hosts.toml shape, read
// from DIR/<host[:port]>/hosts.toml (else DIR/_default/hosts.toml) at
// every pull, so that an edit needs no restart:
//
//	server = "https://registry.example:5000"   # the origin (default https://<host>)
//	ca = "ca.pem"                               # relative to the host's dir
//	[host."https://mirror.internal"]
//	  capabilities = ["pull", "resolve"]
//	  ca = ["/etc/ssl/mirror-ca.pem"]
//	  client = [["client.crt", "client.key"]]
//	  skip_verify = false
//	  override_path = false
//	  [host."https://mirror.internal".header]
//	    x-tenant = "a"
//
// Mirrors ([host."…"]) are tried in the file's order, then the server.

// defaultHostDir is containerd's directory of the hosts.toml that serves a
// host without its own.
const defaultHostDir = "_default"

// hostFields are the keys a host (the server or a mirror) may have.
type hostFields struct {
	Capabilities []string       `toml:"capabilities"`
	CA           any            `toml:"ca"`
	Client       any            `toml:"client"`
	SkipVerify   *bool          `toml:"skip_verify"`
	Header       map[string]any `toml:"header"`
	OverridePath bool           `toml:"override_path"`
}

type hostsFile struct {
	Server string `toml:"server"`
	hostFields
	Host map[string]hostFields `toml:"host"`
}

// hostEndpoint is one host of a hosts.toml, resolved: its files read.
type hostEndpoint struct {
	url           *url.URL // scheme and host; Path is where the API's /v2 is
	resolve, pull bool
	tls           *tls.Config // nil: the shared transport's
	tlsKey        string      // identifies tls for the transport cache
	header        http.Header
}

// hostsConfig is one registry's hosts.toml: its mirrors, then its server.
type hostsConfig struct {
	file    string
	mirrors []hostEndpoint
	server  hostEndpoint
}

// validHostDir is a host[:port] that is safe as one directory name below
// registry_config_path: the host comes from an image reference that a pod
// names, so it must not be "..", hold a slash or a NUL, or be absolute.
var validHostDir = regexp.MustCompile(`^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$`)

// loadHosts reads the hosts.toml of host below dir: the host's own, else
// _default's; nil when there is none (or dir is empty).
func loadHosts(dir, host string) (*hostsConfig, error) {
	if dir == "" {
		return nil, nil
	}
	if !validHostDir.MatchString(host) {
		return nil, fmt.Errorf("registry host %q cannot name a directory of registry_config_path", host)
	}
	own, err := hostDirOf(dir, host)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{own, defaultHostDir} {
		if d == "" {
			continue
		}
		hostDir := filepath.Join(dir, d)
		file := filepath.Join(hostDir, "hosts.toml")
		data, err := os.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("registry host config: %w", err)
		}
		return parseHosts(file, hostDir, host, data)
	}
	return nil, nil
}

// hostDirOf is the directory of dir that is host's, whichever spelling of
// the host its name is (hostKey: "Registry.Example:0443" is
// registry.example's); "" when there is none. Two that name one registry
// are an error, not a choice: which one judged a pull would depend on the
// spelling a pod wrote.
func hostDirOf(dir, host string) (string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("registry host config: %w", err)
	}
	want := hostKey(host)
	var found string
	for _, e := range entries {
		if (!e.IsDir() && e.Type()&fs.ModeSymlink == 0) || e.Name() == defaultHostDir || want == "" || hostKey(e.Name()) != want {
			continue
		}
		if found != "" {
			return "", fmt.Errorf("registry host config: %s and %s name the same registry %s", filepath.Join(dir, found), filepath.Join(dir, e.Name()), want)
		}
		found = e.Name()
	}
	return found, nil
}

// parseHosts reads one hosts.toml; errors name the file and the key.
func parseHosts(file, hostDir, host string, data []byte) (*hostsConfig, error) {
	var f hostsFile
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		return nil, fmt.Errorf("%s: unknown key %s", file, undecoded[0])
	}
	hc := &hostsConfig{file: file}
	server := f.Server
	if server == "" {
		server = "https://" + host
	}
	hc.server, err = resolveHost(hostDir, server, f.hostFields, "server")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	// The mirrors in the order the file lists them (a map has none).
	var order []string
	for _, k := range md.Keys() {
		if len(k) == 2 && k[0] == "host" && !slices.Contains(order, k[1]) {
			order = append(order, k[1])
		}
	}
	for _, u := range order {
		ep, err := resolveHost(hostDir, u, f.Host[u], fmt.Sprintf("host.%q", u))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		hc.mirrors = append(hc.mirrors, ep)
	}
	return hc, nil
}

func resolveHost(hostDir, rawURL string, h hostFields, key string) (hostEndpoint, error) {
	var ep hostEndpoint
	if !strings.Contains(rawURL, "://") {
		rawURL = "https://" + rawURL
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return ep, fmt.Errorf("%s: %w", key, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return ep, fmt.Errorf("%s: scheme must be http or https", key)
	}
	if u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return ep, fmt.Errorf("%s: want http[s]://host[:port][/path] and nothing more", key)
	}
	path := strings.TrimSuffix(u.Path, "/")
	if !h.OverridePath {
		path += "/v2" // containerd's rule: the path is the API's root unless override_path
	}
	ep.url = &url.URL{Scheme: u.Scheme, Host: u.Host, Path: path}

	ep.resolve, ep.pull = true, true
	if h.Capabilities != nil {
		ep.resolve, ep.pull = false, false
		for _, c := range h.Capabilities {
			switch c {
			case "resolve":
				ep.resolve = true
			case "pull":
				ep.pull = true
			case "push": // nothing minicri does
			default:
				return ep, fmt.Errorf("%s.capabilities: %q is not pull, resolve or push", key, c)
			}
		}
	}
	if ep.header, err = parseHeader(h.Header, key); err != nil {
		return ep, err
	}
	cas, err := stringList(h.CA, key+".ca")
	if err != nil {
		return ep, err
	}
	clients, err := clientPairs(h.Client, key+".client")
	if err != nil {
		return ep, err
	}
	skip := h.SkipVerify != nil && *h.SkipVerify
	if len(cas) == 0 && len(clients) == 0 && !skip {
		return ep, nil
	}
	ep.tls, ep.tlsKey, err = tlsConfig(hostDir, cas, clients, skip, key)
	return ep, err
}

func parseHeader(h map[string]any, key string) (http.Header, error) {
	if len(h) == 0 {
		return nil, nil
	}
	out := http.Header{}
	for name, v := range h {
		vals, err := stringList(v, fmt.Sprintf("%s.header.%q", key, name))
		if err != nil {
			return nil, err
		}
		for _, val := range vals {
			out.Add(name, val)
		}
	}
	return out, nil
}

// stringList reads a string or a list of strings.
func stringList(v any, key string) ([]string, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []string{v}, nil
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("%s: want a string or a list of strings", key)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: want a string or a list of strings", key)
}

// clientPairs reads containerd's client key: "cert.pem" (its key in the same
// file), or a list of such strings and ["cert", "key"] pairs.
func clientPairs(v any, key string) ([][2]string, error) {
	bad := fmt.Errorf(`%s: want "cert.pem", or a list of "cert.pem" and ["cert.pem", "key.pem"]`, key)
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		return [][2]string{{v, ""}}, nil
	case []any:
		var out [][2]string
		for _, e := range v {
			switch e := e.(type) {
			case string:
				out = append(out, [2]string{e, ""})
			case []any:
				pair, err := stringList(e, key)
				if err != nil || len(pair) < 1 || len(pair) > 2 {
					return nil, bad
				}
				if len(pair) == 1 {
					pair = append(pair, "")
				}
				out = append(out, [2]string{pair[0], pair[1]})
			default:
				return nil, bad
			}
		}
		return out, nil
	}
	return nil, bad
}

// tlsConfig reads the CA bundles (added to the system's roots, as
// containerd does) and client certificates of one host.
func tlsConfig(hostDir string, cas []string, clients [][2]string, skip bool, key string) (*tls.Config, string, error) {
	id := sha256.New()
	fmt.Fprintf(id, "skip=%v\n", skip)
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: skip} //nolint:gosec // the operator's skip_verify
	if len(cas) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		for _, ca := range cas {
			data, err := os.ReadFile(inDir(hostDir, ca))
			if err != nil {
				return nil, "", fmt.Errorf("%s: %w", key+".ca", err)
			}
			if !pool.AppendCertsFromPEM(data) {
				return nil, "", fmt.Errorf("%s: %s holds no PEM certificate", key+".ca", ca)
			}
			fmt.Fprintf(id, "ca\n%s\n", data)
		}
		cfg.RootCAs = pool
	}
	for _, c := range clients {
		certFile, keyFile := inDir(hostDir, c[0]), inDir(hostDir, c[1])
		if c[1] == "" {
			keyFile = certFile
		}
		certPEM, err := os.ReadFile(certFile)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", key+".client", err)
		}
		keyPEM, err := os.ReadFile(keyFile)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", key+".client", err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %s: %w", key+".client", c[0], err)
		}
		cfg.Certificates = append(cfg.Certificates, pair)
		fmt.Fprintf(id, "client\n%s\n%s\n", certPEM, keyPEM)
	}
	return cfg, fmt.Sprintf("%x", id.Sum(nil)), nil
}

// inDir resolves a path of a hosts.toml: relative ones against the host's dir.
func inDir(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// maxHostTransports bounds the transports kept for hosts with their own TLS
// settings; past it they are all dropped (and their idle connections closed).
const maxHostTransports = 64

// hostTransports keeps one transport per TLS configuration, so that pulls
// from one host reuse connections, and an edited CA or client certificate
// (another key) takes effect at the next pull.
type hostTransports struct {
	mu sync.Mutex
	m  map[string]*http.Transport
}

func (h *hostTransports) get(key string, cfg *tls.Config) *http.Transport {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.m[key]; ok {
		return t
	}
	if h.m == nil || len(h.m) >= maxHostTransports {
		for _, t := range h.m {
			t.CloseIdleConnections()
		}
		h.m = map[string]*http.Transport{}
	}
	t := remote.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = cfg
	h.m[key] = t
	return t
}

// hostRequests adds a host's headers to the requests to it and moves its
// API root from /v2 to where the hosts.toml says it is. Requests to other
// hosts (a token service, a blob store the registry redirects to) go as
// they are.
type hostRequests struct {
	host   string
	root   string // "/v2" unchanged
	header http.Header
	inner  http.RoundTripper
}

func (t hostRequests) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != t.host {
		return t.inner.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	for k, vs := range t.header {
		if req.Header.Get(k) == "" {
			req.Header[http.CanonicalHeaderKey(k)] = slices.Clone(vs)
		}
	}
	if t.root != "/v2" && (req.URL.Path == "/v2" || strings.HasPrefix(req.URL.Path, "/v2/")) {
		req.URL.Path = t.root + strings.TrimPrefix(req.URL.Path, "/v2")
		req.URL.RawPath = ""
	}
	return t.inner.RoundTrip(req)
}
