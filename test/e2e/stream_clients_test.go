//go:build e2e || cluster

// kubectl's stream clients (exec, attach, port-forward over SPDY and
// WebSocket), shared by the e2e suite, which points them at minicri's
// streaming server or the kubelet, and the cluster's tests, which point them
// at the API server.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
)

// protocols are the two ways kubectl streams: SPDY (what the kubelet
// proxies) and WebSocket v5.channel.k8s.io (kubectl's default today).
var protocols = []string{"spdy", "websocket"}

// executorWith returns kubectl's executor of proto for u, with the client
// config cfg. Unlike kubectl's, it never falls back from WebSocket to SPDY:
// a test of one protocol tests that one.
func executorWith(t *testing.T, cfg *rest.Config, proto, u string) remotecommand.Executor {
	t.Helper()
	var (
		ex  remotecommand.Executor
		err error
	)
	switch proto {
	case "spdy":
		var parsed *url.URL
		if parsed, err = url.Parse(u); err == nil {
			ex, err = remotecommand.NewSPDYExecutor(cfg, "POST", parsed)
		}
	case "websocket":
		ex, err = remotecommand.NewWebSocketExecutor(cfg, "GET", u)
	default:
		err = fmt.Errorf("unknown protocol %q", proto)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

// lockedBuffer is a buffer the stream's goroutines write while the test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// forwardPorts runs kubectl's port-forward client over SPDY, with the client
// config cfg, against u and returns the local port that forwards to remote.
func forwardPorts(t *testing.T, cfg *rest.Config, u string, remote int) int {
	t.Helper()
	return forwardPortsOver(t, cfg, "spdy", u, remote)
}

// forwardPortsOver is forwardPorts over proto: SPDY, or SPDY tunneled in a
// WebSocket (kubectl's default against an API server that takes it; no
// fallback to SPDY here either).
func forwardPortsOver(t *testing.T, cfg *rest.Config, proto, u string, remote int) int {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	var dialer httpstream.Dialer
	switch proto {
	case "spdy":
		transport, upgrader, err := spdy.RoundTripperFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		dialer = spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", parsed)
	case "websocket":
		if dialer, err = portforward.NewSPDYOverWebsocketDialer(parsed, cfg); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("unknown protocol %q", proto)
	}
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", remote)}, stop, ready, io.Discard, os.Stderr)
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
	case <-time.After(30 * time.Second):
		t.Fatal("port-forward not ready after 30 s")
	}
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	return int(ports[0].Local)
}

// attachAndType attaches to u, a container that answers each line L it reads
// with "got L", over proto with the client config cfg; types msg until the
// container answers "got msg", and detaches.
func attachAndType(t *testing.T, cfg *rest.Config, proto, u, msg string) {
	t.Helper()
	stdin, typing := io.Pipe()
	defer typing.Close()
	var out lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		err := executorWith(t, cfg, proto, u).
			StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Stderr: &out})
		stdin.Close() // a line typed after the end fails rather than waits forever
		errc <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "got "+msg) {
		select {
		case err := <-errc:
			t.Fatalf("the attach over %s ended before the container answered: %v; output %q", proto, err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q from the attached container after 30 s over %s; output %q", "got "+msg, proto, out.String())
		}
		// Lines typed before the attach is wired are lost, as they would be
		// for a user: type until one comes back.
		io.WriteString(typing, msg+"\n")
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	select {
	case <-errc:
	case <-time.After(10 * time.Second):
		t.Fatalf("the attach over %s did not end 10 s after the client cancelled", proto)
	}
}
