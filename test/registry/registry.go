// Package registry runs Debian's docker-registry (the CNCF distribution
// registry) on 127.0.0.1 for tests: real registry protocol, real auth, real
// TLS, with its storage in a temp dir and the process stopped in t.Cleanup.
//
//	r := registry.Start(t, registry.Options{})
//	digest := testimage.Push(t, testimage.Busybox(t), r.Host()+"/busybox:latest")
package registry

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minicri/minicri/internal/osthread"
)

// Binary is the registry executable (Debian package docker-registry).
const Binary = "/usr/bin/docker-registry"

// startTimeout bounds the wait for /v2/ to answer after the process starts.
const startTimeout = 15 * time.Second

// Options selects what the registry demands of its clients.
type Options struct {
	// Users enables basic auth (htpasswd, bcrypt) with these user → password pairs.
	Users map[string]string
	// TLS serves HTTPS with a self-signed certificate for 127.0.0.1; clients
	// that do not trust it (see Transport and CACertFile) fail verification.
	TLS bool
	// ClientCert (with TLS) makes the registry demand a client certificate
	// signed by a CA of its own (http.tls.clientcas); see ClientCertFiles.
	ClientCert bool
}

// Registry is one running (or stopped, see Stop) registry process.
type Registry struct {
	t      testing.TB
	dir    string
	host   string
	config string
	tls    bool
	caPEM  []byte
	client *tls.Certificate // the client certificate it demands, or nil

	mu     sync.Mutex
	proc   *os.Process     // nil while stopped
	exited <-chan struct{} // closed when proc has been reaped
}

// Start runs a registry on 127.0.0.1 and a free port, waits until it answers,
// and stops it when the test ends. It skips the test when the binary is missing.
func Start(t testing.TB, opts Options) *Registry {
	t.Helper()
	if _, err := os.Stat(Binary); err != nil {
		t.Skipf("registry binary %s not installed: %v", Binary, err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("registry: pick a port: %v", err)
	}
	r := &Registry{t: t, dir: t.TempDir(), host: "127.0.0.1:" + strconv.Itoa(port), tls: opts.TLS}
	if err := r.writeConfig(opts); err != nil {
		t.Fatalf("registry: %v", err)
	}
	t.Cleanup(r.Stop)
	if err := r.start(); err != nil {
		t.Fatalf("registry: %v", err)
	}
	return r
}

// Host returns "127.0.0.1:PORT", the registry part of image references.
func (r *Registry) Host() string { return r.host }

// URL returns the registry's base URL, "http://127.0.0.1:PORT" or "https://…".
func (r *Registry) URL() string { return r.scheme() + "://" + r.host }

// Pid is the registry process's, 0 while it is stopped.
func (r *Registry) Pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return 0
	}
	return r.proc.Pid
}

// CACertFile returns the path of the self-signed certificate (PEM), "" without TLS.
func (r *Registry) CACertFile() string {
	if !r.tls {
		return ""
	}
	return filepath.Join(r.dir, "cert.pem")
}

// ClientCertFiles returns the PEM files of the client certificate and key
// the registry accepts, "" without Options.ClientCert.
func (r *Registry) ClientCertFiles() (cert, key string) {
	if r.client == nil {
		return "", ""
	}
	return filepath.Join(r.dir, "client.pem"), filepath.Join(r.dir, "client-key.pem")
}

// Transport returns an http.RoundTripper that trusts this registry's
// certificate (a plain transport without TLS), and presents its client
// certificate if it demands one, for pushing to it.
func (r *Registry) Transport() http.RoundTripper {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if r.tls {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(r.caPEM)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		if r.client != nil {
			tr.TLSClientConfig.Certificates = []tls.Certificate{*r.client}
		}
	}
	return tr
}

// Stop kills the registry and waits for it to exit; its storage stays, so
// Restart serves the same content. Stopping a stopped registry is a no-op.
func (r *Registry) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return
	}
	_ = r.proc.Kill() // by pid: only the process this helper started
	<-r.exited
	r.proc = nil
}

// Restart starts a stopped registry again on the same port and storage.
func (r *Registry) Restart() {
	r.t.Helper()
	if err := r.start(); err != nil {
		r.t.Fatalf("registry: restart: %v", err)
	}
}

func (r *Registry) scheme() string {
	if r.tls {
		return "https"
	}
	return "http"
}

func (r *Registry) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		return nil
	}
	logFile, err := os.OpenFile(filepath.Join(r.dir, "registry.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(Binary, "serve", r.config)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Environment variables named REGISTRY_* would override the config file.
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	// Die with the test binary even if it is killed before t.Cleanup runs;
	// from a thread that lives as long as the registry (the signal follows
	// the forking thread, which a test's namespace helper may end).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	exited, err := osthread.StartChild(cmd)
	if err != nil {
		return fmt.Errorf("start %s: %w", Binary, err)
	}
	if err := r.waitReady(exited); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("%w; log:\n%s", err, r.logTail())
	}
	r.proc, r.exited = cmd.Process, exited
	return nil
}

func (r *Registry) waitReady(exited <-chan struct{}) error {
	client := &http.Client{Timeout: time.Second, Transport: r.Transport()}
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("registry exited before it answered /v2/")
		default:
		}
		resp, err := client.Get(r.URL() + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("registry on %s did not answer /v2/ within %v", r.host, startTimeout)
}

func (r *Registry) logTail() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "registry.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (r *Registry) writeConfig(opts Options) error {
	var cfg strings.Builder
	fmt.Fprintf(&cfg, `version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, filepath.Join(r.dir, "storage"), r.host)
	if opts.TLS {
		if err := r.writeCert(); err != nil {
			return fmt.Errorf("self-signed certificate: %w", err)
		}
		fmt.Fprintf(&cfg, "  tls:\n    certificate: %s\n    key: %s\n",
			filepath.Join(r.dir, "cert.pem"), filepath.Join(r.dir, "key.pem"))
		if opts.ClientCert {
			if err := r.writeClientCert(); err != nil {
				return fmt.Errorf("client certificate: %w", err)
			}
			fmt.Fprintf(&cfg, "    clientcas:\n      - %s\n", filepath.Join(r.dir, "client-ca.pem"))
		}
	}
	if len(opts.Users) > 0 {
		htpasswd, err := makeHtpasswd(opts.Users)
		if err != nil {
			return err
		}
		path := filepath.Join(r.dir, "htpasswd")
		if err := os.WriteFile(path, htpasswd, 0o600); err != nil {
			return err
		}
		fmt.Fprintf(&cfg, "auth:\n  htpasswd:\n    realm: test-registry\n    path: %s\n", path)
	}
	r.config = filepath.Join(r.dir, "config.yml")
	return os.WriteFile(r.config, []byte(cfg.String()), 0o644)
}

// makeHtpasswd hashes the passwords with bcrypt through htpasswd(1), the
// only hash the registry accepts.
func makeHtpasswd(users map[string]string) ([]byte, error) {
	names := make([]string, 0, len(users))
	for u := range users {
		names = append(names, u)
	}
	sort.Strings(names)
	var out bytes.Buffer
	for _, u := range names {
		line, err := exec.Command("htpasswd", "-Bbn", u, users[u]).Output()
		if err != nil {
			return nil, fmt.Errorf("htpasswd for %s: %w", u, err)
		}
		out.Write(bytes.TrimSpace(line))
		out.WriteByte('\n')
	}
	return out.Bytes(), nil
}

func (r *Registry) writeCert() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	r.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	if err := os.WriteFile(filepath.Join(r.dir, "cert.pem"), r.caPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.dir, "key.pem"), keyPEM, 0o600)
}

// writeClientCert makes a client CA (client-ca.pem, which the registry
// trusts) and a client certificate it signed (client.pem, client-key.pem).
func (r *Registry) writeClientCert() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "test client CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano() + 1),
		Subject:      pkix.Name{CommonName: "test client"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	r.client = &pair
	for name, data := range map[string][]byte{
		"client-ca.pem":  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"client.pem":     certPEM,
		"client-key.pem": keyPEM,
	} {
		if err := os.WriteFile(filepath.Join(r.dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
