//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// kubeletClientConfig is how kubectl would reach the kubelet directly: TLS
// to its self-signed certificate, no credentials (anonymous is allowed).
var kubeletClientConfig = &rest.Config{TLSClientConfig: rest.TLSClientConfig{Insecure: true}}

// streamURL is the kubelet's URL of an exec or attach: /KIND/e2e/POD/CONTAINER?...
func (k *Kubelet) streamURL(kind, pod, container string, cmd []string, stdin, tty bool) string {
	q := url.Values{"output": {"1"}}
	for _, c := range cmd {
		q.Add("command", c)
	}
	if stdin {
		q.Set("input", "1")
	}
	if tty {
		q.Set("tty", "1")
	} else {
		q.Set("error", "1")
	}
	return k.url(fmt.Sprintf("/%s/e2e/%s/%s?%s", kind, k.podName(pod), container, q.Encode()))
}

// kubeletStream runs a stream of the kubelet's over proto, bounded by 60 s.
func (k *Kubelet) stream(t *testing.T, proto, u string, opts remotecommand.StreamOptions) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := executorWith(t, kubeletClientConfig, proto, u).StreamWithContext(ctx, opts)
	if ctx.Err() != nil {
		t.Fatalf("stream %s over %s did not end within 60 s", u, proto)
	}
	return err
}

func testExecThroughKubelet(t *testing.T, n *kubeletNode) {
	k := n.k
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			t.Run("StdinEOFEndsCat", func(t *testing.T) {
				var out lockedBuffer
				err := k.stream(t, proto, k.streamURL("exec", "stream", "shell", []string{"cat"}, true, false),
					remotecommand.StreamOptions{Stdin: strings.NewReader("hello through the kubelet\n"), Stdout: &out, Stderr: &out})
				if err != nil || out.String() != "hello through the kubelet\n" {
					t.Errorf("cat: err %v, output %q; want the input back and a clean end", err, out.String())
				}
			})
			t.Run("NonZeroExitCode", func(t *testing.T) {
				var stdout, stderr lockedBuffer
				err := k.stream(t, proto, k.streamURL("exec", "stream", "shell", []string{"sh", "-c", "echo out; echo err >&2; exit 7"}, false, false),
					remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
				var exit utilexec.ExitError
				if !errors.As(err, &exit) || exit.ExitStatus() != 7 {
					t.Errorf("err = %v, want exit code 7", err)
				}
				if stdout.String() != "out\n" || stderr.String() != "err\n" {
					t.Errorf("stdout %q, stderr %q: want them apart", stdout.String(), stderr.String())
				}
			})
			t.Run("TTYResize", func(t *testing.T) {
				sizes := make(sizeQueue, 2)
				sizes <- remotecommand.TerminalSize{Width: 80, Height: 24}
				stdin, typing := io.Pipe()
				var out lockedBuffer
				errc := make(chan error, 1)
				go func() {
					err := k.stream(t, proto, k.streamURL("exec", "stream", "shell", []string{"sh", "-c", "tty; while read line; do stty size; done"}, true, true),
						remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Tty: true, TerminalSizeQueue: sizes})
					stdin.Close() // a line typed after the end fails rather than waits forever
					errc <- err
				}()
				typeUntil(t, &out, typing, "/dev/pts/")
				typeUntil(t, &out, typing, "24 80")
				sizes <- remotecommand.TerminalSize{Width: 132, Height: 43}
				typeUntil(t, &out, typing, "43 132")
				close(sizes)
				typing.Close()
				if err := <-errc; err != nil {
					t.Errorf("tty exec: %v", err)
				}
			})
			t.Run("Stream100MB", func(t *testing.T) {
				const size = 100_000_000
				var out countingWriter
				start := time.Now()
				err := k.stream(t, proto, k.streamURL("exec", "stream", "shell", []string{"head", "-c", fmt.Sprint(size), "/dev/zero"}, false, false),
					remotecommand.StreamOptions{Stdout: &out, Stderr: io.Discard})
				if err != nil || out.n != size || out.nz {
					t.Fatalf("err %v, %d bytes (non-zero bytes: %v), want %d zero bytes", err, out.n, out.nz, size)
				}
				t.Logf("100 MB through the kubelet over %s in %s", proto, time.Since(start).Round(time.Millisecond))
			})
		})
	}
}

// attachEcho attaches to the stream pod's echo container over proto, types
// msg until the container answers "got msg", and detaches.
func attachEcho(t *testing.T, k *Kubelet, proto, msg string) {
	t.Helper()
	attachAndType(t, kubeletClientConfig, proto, k.streamURL("attach", "stream", "echo", nil, true, false), msg)
}

func testAttachThroughKubelet(t *testing.T, n *kubeletNode) {
	k := n.k
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) { attachEcho(t, k, proto, "hello-"+proto) })
	}
	// Detaching leaves the container running.
	if p := k.pod(t, "stream"); p == nil || !running(p) {
		t.Errorf("pod stream not running after the attaches")
	}
}

func testPortForwardThroughKubelet(t *testing.T, n *kubeletNode) {
	k := n.k
	local := forwardPorts(t, kubeletClientConfig, k.url("/portForward/e2e/"+k.podName("hostport")), 8080)
	addr := fmt.Sprintf("127.0.0.1:%d", local)
	// Three times: each connection is a stream of its own in the one forward.
	for i := 0; i < 3; i++ {
		if got := readLine(addr); got != "port-ok" {
			t.Fatalf("connection %d through the forwarded port: %q, want the pod's answer", i+1, got)
		}
	}
}
