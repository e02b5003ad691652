package image

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/minicri/minicri/test/registry"
	tim "github.com/minicri/minicri/test/testimage"
)

func writeHosts(t *testing.T, dir, host, content string) string {
	t.Helper()
	d := filepath.Join(dir, host)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(d, "hosts.toml")
	if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestParseHosts(t *testing.T) {
	type host struct {
		url           string
		resolve, pull bool
		tls           bool
		header        string
	}
	for _, tc := range []struct {
		name    string
		file    string
		server  host
		mirrors []host
		err     string // in the error, with the file's name
	}{
		{name: "empty", server: host{url: "https://reg.example/v2", resolve: true, pull: true}},
		{name: "server and mirrors in order", file: `
server = "https://origin.example:5000"
[host."https://z.example"]
  capabilities = ["pull"]
[host."http://a.example:5001/base"]
  capabilities = ["pull", "resolve"]
  override_path = true
  [host."http://a.example:5001/base".header]
    x-one = "1"
    x-two = ["2", "3"]
`, server: host{url: "https://origin.example:5000/v2", resolve: true, pull: true},
			mirrors: []host{
				{url: "https://z.example/v2", pull: true},
				{url: "http://a.example:5001/base", resolve: true, pull: true, header: "X-One=1 X-Two=2,3"},
			}},
		{name: "skip_verify", file: "skip_verify = true\n",
			server: host{url: "https://reg.example/v2", resolve: true, pull: true, tls: true}},
		{name: "unknown key", file: "[host.\"https://m\"]\n  capabilites = [\"pull\"]\n", err: `unknown key host."https://m".capabilites`},
		{name: "bad capability", file: "capabilities = [\"pull\", \"fetch\"]\n", err: `server.capabilities: "fetch"`},
		{name: "bad scheme", file: "server = \"ftp://x\"\n", err: "server: scheme must be http or https"},
		{name: "query", file: "[host.\"https://m?x=1\"]\n", err: `host."https://m?x=1": want`},
		{name: "bad ca", file: "ca = 3\n", err: "server.ca: want a string or a list of strings"},
		{name: "missing ca", file: "ca = \"nope.pem\"\n", err: "server.ca: open "},
		{name: "bad client", file: "client = [[\"a\", \"b\", \"c\"]]\n", err: "server.client: want"},
		{name: "bad toml", file: "server = \n", err: "hosts.toml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := writeHosts(t, dir, "reg.example", tc.file)
			hc, err := loadHosts(dir, "reg.example")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), file) {
					t.Fatalf("error %v, want one naming %s and %q", err, file, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			conv := func(h hostEndpoint) host {
				var hdr []string
				for _, k := range []string{"X-One", "X-Two"} {
					if v := h.header.Values(k); len(v) > 0 {
						hdr = append(hdr, k+"="+strings.Join(v, ","))
					}
				}
				return host{h.url.String(), h.resolve, h.pull, h.tls != nil, strings.Join(hdr, " ")}
			}
			if got := conv(hc.server); got != tc.server {
				t.Errorf("server %+v, want %+v", got, tc.server)
			}
			if len(hc.mirrors) != len(tc.mirrors) {
				t.Fatalf("%d mirrors, want %d", len(hc.mirrors), len(tc.mirrors))
			}
			for i, m := range hc.mirrors {
				if got := conv(m); got != tc.mirrors[i] {
					t.Errorf("mirror %d: %+v, want %+v", i, got, tc.mirrors[i])
				}
			}
		})
	}
}

// A registry host comes from an image reference a pod names: it must not
// reach a file outside registry_config_path.
func TestHostsHostCannotEscape(t *testing.T) {
	dir := t.TempDir()
	writeHosts(t, dir, "_default", "server = \"http://evil.example\"\n")
	// Files that an escaping name would find.
	writeHosts(t, filepath.Dir(dir), filepath.Base(dir)+"-x", "server = \"http://evil.example\"\n")
	for _, host := range []string{"..", ".", "../" + filepath.Base(dir) + "-x", "/etc", "a/b", "a\x00b", "host:50x", "host:", "a..b", "[::1]/x", ""} {
		if _, err := loadHosts(dir, host); err == nil || !strings.Contains(err.Error(), "cannot name a directory") {
			t.Errorf("loadHosts(%q) = %v, want refused", host, err)
		}
	}
	for _, host := range []string{"reg.example", "127.0.0.1:5000", "[::1]:5000", "localhost"} {
		if hc, err := loadHosts(dir, host); err != nil || hc == nil {
			t.Errorf("loadHosts(%q) = %v, %v; want _default's", host, hc, err)
		}
	}
}

// TestPullThroughHostsTOML pulls from a TLS registry whose CA only the
// hosts.toml names; without the file the pull fails naming the host, and
// an edit takes effect at the next pull.
func TestPullThroughHostsTOML(t *testing.T) {
	reg := registry.Start(t, registry.Options{TLS: true})
	img := tim.Busybox(t)
	ref := reg.Host() + "/tls:1"
	tim.Push(t, img, ref, remote.WithTransport(reg.Transport()))
	dir := t.TempDir()
	s := newTestStore(t, Options{RegistryConfigPath: dir})

	if _, err := s.Pull(testContext(t), ref, nil); err == nil || !strings.Contains(err.Error(), reg.Host()) {
		t.Fatalf("pull without a CA: %v, want a failure naming %s", err, reg.Host())
	}
	ca, err := os.ReadFile(reg.CACertFile())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, reg.Host()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, reg.Host(), "ca.pem"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	writeHosts(t, dir, reg.Host(), "ca = \"ca.pem\"\n") // relative to the host's dir
	if got, err := s.Pull(testContext(t), ref, nil); err != nil || got.ID != tim.ConfigDigest(t, img) {
		t.Fatalf("pull with the hosts.toml's CA: %s, %v", got.ID, err)
	}
	// A mirror that may only pull cannot resolve the tag; the server does.
	writeHosts(t, dir, reg.Host(), "ca = \"ca.pem\"\n[host.\"https://127.0.0.1:1\"]\n  capabilities = [\"push\"]\n")
	if _, err := s.Pull(testContext(t), ref, nil); err != nil {
		t.Fatalf("pull with a mirror that may neither resolve nor pull: %v", err)
	}
	writeHosts(t, dir, reg.Host(), "ca = \"missing.pem\"\n")
	if _, err := s.Pull(testContext(t), ref, nil); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("pull after the edit: %v, want the missing CA named", err)
	}
}

// TestPullWithClientCertificate: a registry that demands a client
// certificate is pulled from with the hosts.toml's client pair.
func TestPullWithClientCertificate(t *testing.T) {
	reg := registry.Start(t, registry.Options{TLS: true, ClientCert: true})
	img := tim.Busybox(t)
	ref := reg.Host() + "/mtls:1"
	tim.Push(t, img, ref, remote.WithTransport(reg.Transport()))
	dir := t.TempDir()
	s := newTestStore(t, Options{RegistryConfigPath: dir})
	writeHosts(t, dir, reg.Host(), "ca = \""+reg.CACertFile()+"\"\n")
	if _, err := s.Pull(testContext(t), ref, nil); err == nil || !strings.Contains(err.Error(), reg.Host()) {
		t.Fatalf("pull without a client certificate: %v, want a failure naming %s", err, reg.Host())
	}
	cert, key := reg.ClientCertFiles()
	writeHosts(t, dir, reg.Host(), "ca = \""+reg.CACertFile()+"\"\nclient = [[\""+cert+"\", \""+key+"\"]]\n")
	if got, err := s.Pull(testContext(t), ref, nil); err != nil || got.ID != tim.ConfigDigest(t, img) {
		t.Fatalf("pull with the client certificate: %s, %v", got.ID, err)
	}
}

// TestHostsHeaderAndOverridePath: a mirror's headers reach it, and
// override_path moves its API root.
func TestHostsHeaderAndOverridePath(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := push(t, reg, "app:1", tim.Busybox(t))
	var sawHeader, sawPrefix bool
	upstream := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: reg.Host()})
	rp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Tenant") == "a" {
			sawHeader = true
		}
		if !strings.HasPrefix(r.URL.Path, "/mirror/v2/") && r.URL.Path != "/mirror/v2" {
			http.Error(w, "wrong path "+r.URL.Path, http.StatusNotFound)
			return
		}
		sawPrefix = true
		r.URL.Path = strings.TrimPrefix(r.URL.Path, "/mirror")
		upstream.ServeHTTP(w, r)
	}))
	t.Cleanup(rp.Close)
	dir := t.TempDir()
	mirror := rp.URL + "/mirror/v2"
	writeHosts(t, dir, "origin.invalid", "[host.\""+mirror+"\"]\n  override_path = true\n  [host.\""+mirror+"\".header]\n    x-tenant = \"a\"\n")
	s := newTestStore(t, Options{RegistryConfigPath: dir})
	if got, err := s.Pull(testContext(t), "origin.invalid/app:1", nil); err != nil || got.ID != p.configID {
		t.Fatalf("pull through the mirror: %s, %v", got.ID, err)
	}
	if !sawHeader || !sawPrefix {
		t.Errorf("mirror saw header %v, path prefix %v", sawHeader, sawPrefix)
	}
}

// TestAuthFile: the node's auth file serves a pull that brings no
// credentials; the kubelet's win when it sends some.
func TestAuthFile(t *testing.T) {
	reg := registry.Start(t, registry.Options{Users: map[string]string{"bob": "pw"}})
	img := tim.Busybox(t)
	ref := reg.Host() + "/private:1"
	tim.Push(t, img, ref, remoteAuth("bob", "pw"))
	file := filepath.Join(t.TempDir(), "auth.json")
	s := newTestStore(t, Options{AuthFile: file})
	if _, err := s.Pull(testContext(t), ref, nil); err == nil {
		t.Fatal("pull with no auth file succeeded")
	}
	enc := base64.StdEncoding.EncodeToString([]byte("bob:pw"))
	if err := os.WriteFile(file, []byte(`{"auths":{"`+reg.Host()+`":{"auth":"`+enc+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Pull(testContext(t), ref, nil); err != nil || got.ID != tim.ConfigDigest(t, img) {
		t.Fatalf("pull with the auth file: %s, %v", got.ID, err)
	}
	if _, err := s.Pull(testContext(t), ref, &Auth{Username: "bob", Password: "wrong"}); err == nil {
		t.Fatal("the kubelet's wrong credentials were replaced by the auth file's")
	}
	if err := os.WriteFile(file, []byte(`{"auths":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pull(testContext(t), ref, nil); err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("pull with a broken auth file: %v, want the file named", err)
	}
}

func TestNodeAuthLookup(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(file, []byte(`{"auths": {
		"https://index.docker.io/v1/": {"username": "hub", "password": "h"},
		"https://reg.example:5000": {"auth": "YTpi"},
		"other.example": {"identitytoken": "tok"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		want Auth
	}{
		{"docker.io", Auth{Username: "hub", Password: "h"}},
		{"reg.example:5000", Auth{Auth: "YTpi"}},
		{"other.example", Auth{IdentityToken: "tok"}},
		{"reg.example", Auth{}}, // another port is another registry
	} {
		got, err := nodeAuth(file, tc.host, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got == nil {
			got = &Auth{}
		}
		if *got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.host, *got, tc.want)
		}
	}
	kubelet := &Auth{Username: "k"}
	if got, _ := nodeAuth(file, "docker.io", kubelet); got != kubelet {
		t.Errorf("the kubelet's credentials were replaced: %+v", got)
	}
	if got, err := nodeAuth(filepath.Join(t.TempDir(), "missing.json"), "docker.io", nil); got != nil || err != nil {
		t.Errorf("missing auth file: %v, %v; want no credentials", got, err)
	}
}

// TestCredentialsNeverReachAMirror: a mirror that asks for credentials (a
// Basic challenge, or a Bearer one whose token realm is its own) gets none,
// neither the kubelet's nor the auth file's, which are for the registry;
// the pull goes on to the registry, which gets them. A mirror of
// [image.registries] and one of a hosts.toml alike.
func TestCredentialsNeverReachAMirror(t *testing.T) {
	for _, tc := range []struct{ challenge, config string }{
		{"basic", "registries"}, {"bearer", "registries"}, {"basic", "hosts.toml"}, {"bearer", "hosts.toml"},
	} {
		challenge := tc.challenge
		t.Run(tc.challenge+" "+tc.config, func(t *testing.T) {
			upstream := registry.Start(t, registry.Options{Users: map[string]string{"bob": "pw"}})
			img := tim.Busybox(t)
			ref := upstream.Host() + "/private:1"
			tim.Push(t, img, ref, remoteAuth("bob", "pw"))
			var mu sync.Mutex
			var asked int
			var sent []string // what the mirror got that names or proves the user
			var mirror *httptest.Server
			mirror = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				asked++
				if a := r.Header.Get("Authorization"); a != "" {
					sent = append(sent, "Authorization: "+a)
				}
				if q := r.URL.RawQuery; strings.Contains(q, "bob") || strings.Contains(q, "pw") {
					sent = append(sent, "query "+q)
				}
				mu.Unlock()
				if challenge == "basic" {
					w.Header().Set("WWW-Authenticate", `Basic realm="mirror"`)
				} else {
					w.Header().Set("WWW-Authenticate", `Bearer realm="`+mirror.URL+`/token",service="mirror"`)
				}
				w.WriteHeader(http.StatusUnauthorized)
			}))
			t.Cleanup(mirror.Close)
			file := filepath.Join(t.TempDir(), "auth.json")
			enc := base64.StdEncoding.EncodeToString([]byte("bob:pw"))
			if err := os.WriteFile(file, []byte(`{"auths":{"`+upstream.Host()+`":{"auth":"`+enc+`"}}}`), 0o600); err != nil {
				t.Fatal(err)
			}
			opts := Options{AuthFile: file, Registries: map[string]RegistryConfig{upstream.Host(): {Mirrors: []string{mirror.URL}}}}
			if tc.config == "hosts.toml" {
				opts.Registries = nil
				opts.RegistryConfigPath = t.TempDir()
				writeHosts(t, opts.RegistryConfigPath, upstream.Host(), "server = \"http://"+upstream.Host()+"\"\n[host.\""+mirror.URL+"\"]\n  capabilities = [\"pull\", \"resolve\"]\n")
			}
			s := newTestStore(t, opts)
			for _, auth := range []*Auth{nil, {Username: "bob", Password: "pw"}} {
				if _, err := s.Pull(testContext(t), ref, auth); err != nil {
					t.Fatalf("pull past the mirror (auth %v): %v", auth != nil, err)
				}
				if err := s.Remove(ref); err != nil {
					t.Fatal(err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if asked == 0 {
				t.Fatal("the mirror was never asked: the test proves nothing")
			}
			for _, s := range sent {
				t.Errorf("the mirror was sent %s", s)
			}
		})
	}
}

// [image.registries], the auth file and registry_config_path are found
// by any spelling of the host, written in any: another spelling of a
// reference's host does not miss its registry's entry (and fall back to
// the default); two entries of one registry are an error.
func TestHostLookupsAreCanonical(t *testing.T) {
	regs := map[string]RegistryConfig{"REG.Example:0443": {Insecure: true}, "127.0.0.1:05000": {Mirrors: []string{"m.example"}}}
	for _, tc := range []struct {
		host string
		want RegistryConfig
	}{
		{"reg.example", regs["REG.Example:0443"]},
		{"127.0.0.1:5000", regs["127.0.0.1:05000"]},
	} {
		got, ok, err := registryConfig(regs, tc.host)
		if err != nil || !ok || got.Insecure != tc.want.Insecure || len(got.Mirrors) != len(tc.want.Mirrors) {
			t.Errorf("registryConfig(%s) = %+v, %v, %v; want %+v", tc.host, got, ok, err, tc.want)
		}
	}
	if _, _, err := registryConfig(map[string]RegistryConfig{"reg.example": {}, "REG.EXAMPLE": {}}, "reg.example"); err == nil {
		t.Error("two [image.registries] keys of one registry: no error")
	}

	file := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(file, []byte(`{"auths": {"https://Reg.Example:0443/v1/": {"auth": "YTpi"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := nodeAuth(file, "reg.example", nil); err != nil || got == nil || got.Auth != "YTpi" {
		t.Errorf("nodeAuth(reg.example) from a key of another spelling = %+v, %v", got, err)
	}

	dir := t.TempDir()
	for _, d := range []string{"REG.EXAMPLE", defaultHostDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "hosts.toml"), []byte(`server = "https://`+strings.ToLower(d)+`.mirror"`+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hc, err := loadHosts(dir, "reg.example")
	if err != nil || hc == nil || hc.server.url.Host != "reg.example.mirror" {
		t.Fatalf("loadHosts(reg.example) with a dir REG.EXAMPLE = %+v, %v; want its own file, not _default's", hc, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "reg.example:443"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := loadHosts(dir, "reg.example"); err == nil || !strings.Contains(err.Error(), "name the same registry") {
		t.Errorf("two dirs of one registry: %v, want an error", err)
	}
}
