package streaming

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/utils/exec"
)

// fakeRuntime runs a few scripted "commands" on the streams, so that the
// protocols can be tested without containers.
type fakeRuntime struct {
	mu      sync.Mutex
	sizes   []TerminalSize
	ended   chan error // what each Exec's context ended with
	started chan struct{}
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{ended: make(chan error, 10), started: make(chan struct{}, 10)}
}

func (f *fakeRuntime) Exec(ctx context.Context, id string, cmd []string, st Streams) error {
	f.started <- struct{}{}
	switch cmd[0] {
	case "greet": // stdout, stderr, exit code
		io.WriteString(st.Stdout, "hello "+id+"\n")
		if st.Stderr != nil {
			io.WriteString(st.Stderr, "oops\n")
		}
		return &ExitError{Code: 3}
	case "cat": // stdin to stdout until its end
		_, err := io.Copy(st.Stdout, st.Stdin)
		return err
	case "sizes": // records resizes until two arrived
		for size := range st.Resize {
			f.mu.Lock()
			f.sizes = append(f.sizes, size)
			n := len(f.sizes)
			f.mu.Unlock()
			fmt.Fprintf(st.Stdout, "%dx%d\n", size.Width, size.Height)
			if n == 2 {
				return nil
			}
		}
		return errors.New("resize stream ended")
	case "hang": // until the client goes
		<-ctx.Done()
		f.ended <- ctx.Err()
		return ctx.Err()
	case "fail":
		return errors.New("no such thing")
	}
	return fmt.Errorf("unknown command %q", cmd[0])
}

func (f *fakeRuntime) Attach(ctx context.Context, id string, st Streams) error {
	io.WriteString(st.Stdout, "attached to "+id+"\n")
	return nil
}

func (f *fakeRuntime) PortForward(ctx context.Context, sandboxID string, port int32, stream io.ReadWriteCloser) error {
	return ForwardPort(ctx, "", port, stream)
}

func startServer(t *testing.T, cfg Config) (*Server, *fakeRuntime) {
	t.Helper()
	rt := newFakeRuntime()
	s, err := New(cfg, rt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, rt
}

// executors are kubectl's two ways of streaming: SPDY and WebSocket (v5).
func executors(t *testing.T, cfg *rest.Config, u string) map[string]remotecommand.Executor {
	t.Helper()
	spdyExec, err := remotecommand.NewSPDYExecutor(cfg, "POST", mustParse(t, u))
	if err != nil {
		t.Fatal(err)
	}
	wsExec, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]remotecommand.Executor{"spdy": spdyExec, "websocket": wsExec}
}

func TestExecOverBothProtocols(t *testing.T) {
	s, _ := startServer(t, Config{})
	for _, proto := range []string{"spdy", "websocket"} {
		t.Run(proto, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			u := execURL(t, s, ExecRequest{ContainerID: "c1", Cmd: []string{"greet"}, Stdout: true, Stderr: true})
			var stdout, stderr bytes.Buffer
			err := executors(t, &rest.Config{}, u)[proto].StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
			var exit utilexec.ExitError
			if !errors.As(err, &exit) || exit.ExitStatus() != 3 {
				t.Fatalf("err = %v, want exit code 3", err)
			}
			if stdout.String() != "hello c1\n" || stderr.String() != "oops\n" {
				t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
			}

			u = execURL(t, s, ExecRequest{ContainerID: "c1", Cmd: []string{"cat"}, Stdin: true, Stdout: true})
			stdout.Reset()
			err = executors(t, &rest.Config{}, u)[proto].StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("to cat\n"), Stdout: &stdout})
			if err != nil || stdout.String() != "to cat\n" {
				t.Errorf("cat: err %v, output %q: the end of stdin must end the command", err, stdout.String())
			}

			u = execURL(t, s, ExecRequest{ContainerID: "c1", Cmd: []string{"fail"}, Stdout: true})
			err = executors(t, &rest.Config{}, u)[proto].StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard})
			if err == nil || !strings.Contains(err.Error(), "no such thing") {
				t.Errorf("a runtime error reaches the client as %v", err)
			}
		})
	}
}

func TestExecResize(t *testing.T) {
	s, rt := startServer(t, Config{})
	for _, proto := range []string{"spdy", "websocket"} {
		t.Run(proto, func(t *testing.T) {
			rt.mu.Lock()
			rt.sizes = nil
			rt.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			u := execURL(t, s, ExecRequest{ContainerID: "c1", Cmd: []string{"sizes"}, Stdin: true, Stdout: true, TTY: true})
			sizes := &sizeQueue{sizes: []remotecommand.TerminalSize{{Width: 80, Height: 24}, {Width: 100, Height: 40}}}
			var stdout bytes.Buffer
			in, inW := io.Pipe()
			defer inW.Close()
			err := executors(t, &rest.Config{}, u)[proto].StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: in, Stdout: &stdout, Tty: true, TerminalSizeQueue: sizes})
			if err != nil || stdout.String() != "80x24\n100x40\n" {
				t.Errorf("err %v, sizes seen %q", err, stdout.String())
			}
		})
	}
}

type sizeQueue struct {
	mu    sync.Mutex
	sizes []remotecommand.TerminalSize
}

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.sizes) == 0 {
		select {} // the client stops asking once the exec is over
	}
	s := q.sizes[0]
	q.sizes = q.sizes[1:]
	return &s
}

func TestClientDisconnectEndsTheRuntimesContext(t *testing.T) {
	s, rt := startServer(t, Config{})
	for _, proto := range []string{"spdy", "websocket"} {
		t.Run(proto, func(t *testing.T) {
			u := execURL(t, s, ExecRequest{ContainerID: "c1", Cmd: []string{"hang"}, Stdout: true})
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				errc <- executors(t, &rest.Config{}, u)[proto].StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard})
			}()
			waitFor(t, rt.started, "the exec to start")
			cancel()
			select {
			case err := <-rt.ended:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("runtime context ended with %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the runtime's context did not end within 5s of the client going away")
			}
			<-errc
		})
	}
}

func TestTokensAreSingleUseAndExpire(t *testing.T) {
	s, _ := startServer(t, Config{TokenTTL: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := execURL(t, s, ExecRequest{ContainerID: "c1", Cmd: []string{"greet"}, Stdout: true})
	_ = executors(t, &rest.Config{}, u)["spdy"].StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard})
	if code := httpStatus(t, u); code != http.StatusNotFound {
		t.Errorf("a used URL answers %d, want 404", code)
	}
	err := executors(t, &rest.Config{}, u)["spdy"].StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard})
	if err == nil {
		t.Error("a used token streamed again")
	}

	u = execURL(t, s, ExecRequest{ContainerID: "c1", Cmd: []string{"greet"}, Stdout: true})
	time.Sleep(300 * time.Millisecond)
	if code := httpStatus(t, u); code != http.StatusNotFound {
		t.Errorf("an expired URL answers %d, want 404", code)
	}
	if code := httpStatus(t, strings.Replace(u, "/exec/", "/attach/", 1)); code != http.StatusNotFound {
		t.Errorf("an exec token on the attach path answers %d, want 404", code)
	}
}

func TestTokenCacheBounds(t *testing.T) {
	c := newTokenCache(time.Minute)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	for i := 0; i < maxInFlight; i++ {
		if _, err := c.insert(i); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
	if _, err := c.insert("one more"); !errors.Is(err, ErrTooManyRequests) {
		t.Fatalf("insert past the bound: %v, want ErrTooManyRequests", err)
	}
	now = now.Add(2 * time.Minute)
	token, err := c.insert("after expiry")
	if err != nil {
		t.Fatalf("expired tokens were not dropped: %v", err)
	}
	if req, ok := c.consume(token); !ok || req != "after expiry" {
		t.Errorf("consume = %v, %v", req, ok)
	}
}

func TestAttach(t *testing.T) {
	s, _ := startServer(t, Config{})
	for _, proto := range []string{"spdy", "websocket"} {
		t.Run(proto, func(t *testing.T) {
			u, err := s.AttachURL(AttachRequest{ContainerID: "c9", Stdout: true})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err = executors(t, &rest.Config{}, u)[proto].StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: &out})
			if err != nil || out.String() != "attached to c9\n" {
				t.Errorf("err %v, output %q", err, out.String())
			}
		})
	}
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certPEM := writeSelfSigned(t, dir)
	s, _ := startServer(t, Config{TLSCert: filepath.Join(dir, "cert.pem"), TLSKey: filepath.Join(dir, "key.pem")})
	u := execURL(t, s, ExecRequest{ContainerID: "c1", Cmd: []string{"greet"}, Stdout: true})
	if !strings.HasPrefix(u, "https://") {
		t.Fatalf("URL %s is not https", u)
	}
	cfg := &rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: certPEM}}
	var out bytes.Buffer
	err := executors(t, cfg, u)["spdy"].StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: &out})
	var exit utilexec.ExitError
	if !errors.As(err, &exit) || out.String() != "hello c1\n" {
		t.Errorf("over TLS: err %v, output %q", err, out.String())
	}
}

func TestPortForwardTwoConnections(t *testing.T) {
	echo := startEchoServer(t)
	s, _ := startServer(t, Config{})
	u, err := s.PortForwardURL(PortForwardRequest{SandboxID: "pod", Ports: []int32{int32(echo)}})
	if err != nil {
		t.Fatal(err)
	}
	local := forwardPorts(t, u, echo)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", local))
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			msg := fmt.Sprintf("connection %d\n", i)
			conn.Write([]byte(msg))
			conn.(*net.TCPConn).CloseWrite()
			got, _ := io.ReadAll(conn)
			if string(got) != msg {
				t.Errorf("connection %d got %q back", i, got)
			}
		}()
	}
	wg.Wait()
}

// forwardPorts runs kubectl's port-forward client against u and returns the
// local port.
func forwardPorts(t *testing.T, u string, remote int) int {
	t.Helper()
	transport, upgrader, err := spdy.RoundTripperFor(&rest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", mustParse(t, u))
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", remote)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	t.Cleanup(func() {
		close(stop)
		<-done
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("port-forward ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("port-forward not ready after 10s")
	}
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	return int(ports[0].Local)
}

func startEchoServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				io.Copy(conn, conn)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func execURL(t *testing.T, s *Server, r ExecRequest) string {
	t.Helper()
	u, err := s.ExecURL(r)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func httpStatus(t *testing.T, u string) int {
	t.Helper()
	resp, err := http.Post(u, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// writeSelfSigned writes cert.pem and key.pem for 127.0.0.1 into dir and
// returns the certificate.
func writeSelfSigned(t *testing.T, dir string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "streaming test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certPEM
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
