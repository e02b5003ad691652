package server

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/streaming"
)

type closingBuffer struct{ bytes.Buffer }

func (*closingBuffer) Close() error { return nil }

// What the streaming server runs once the kubelet connects to an exec URL.
func TestStreamedExec(t *testing.T) {
	ts := newTestServer(t)
	pod := podConfig("web")
	podID := ts.runPod(t, pod)
	created := ts.createCtr(t, podID, pod, ctrConfig("idle"))
	_, running := ts.runningCtr(t, "other")
	rt := streamRuntime{ts.Server}

	ts.runc.ExecStdout = "hi\n"
	var out closingBuffer
	if err := rt.Exec(bg, running, []string{"echo", "hi"}, streaming.Streams{Stdout: &out}); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if out.String() != "hi\n" {
		t.Errorf("stdout = %q, want %q", out.String(), "hi\n")
	}
	ts.runc.ExecCode = 3
	var exit *streaming.ExitError
	if err := rt.Exec(bg, running, []string{"false"}, streaming.Streams{Stdout: &out}); !errors.As(err, &exit) || exit.Code != 3 {
		t.Errorf("Exec of a failing command = %v, want exit code 3", err)
	}
	if err := rt.Exec(bg, created, []string{"true"}, streaming.Streams{Stdout: &out}); !errors.Is(err, errNotRunning) {
		t.Errorf("Exec in a created container = %v, want errNotRunning", err)
	}
	if got := ts.runc.Execs(); len(got) != 2 || strings.Join(got[0], " ") != "echo hi" {
		t.Errorf("execs run: %v; want echo hi, then false", got)
	}
}

// What the streaming server runs once the kubelet connects to an attach URL:
// stdin goes to the container only when it was created with stdin.
func TestStreamedAttach(t *testing.T) {
	for _, c := range []struct {
		name  string
		stdin bool
		want  string
	}{
		{"with stdin", true, "log line\ntyped\n"},
		{"without stdin", false, "log line\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := newTestServer(t)
			pod := podConfig("web")
			podID := ts.runPod(t, pod)
			cfg := ctrConfig("app")
			cfg.Stdin, cfg.Tty = c.stdin, true
			id := ts.createCtr(t, podID, pod, cfg)
			if _, err := ts.StartContainer(bg, &runtime.StartContainerRequest{ContainerId: id}); err != nil {
				t.Fatal(err)
			}
			ts.monitor.AttachOutput = "log line\n"
			var out closingBuffer
			resize := make(chan streaming.TerminalSize)
			close(resize)
			err := streamRuntime{ts.Server}.Attach(bg, id, streaming.Streams{Stdin: strings.NewReader("typed\n"), Stdout: &out, TTY: true, Resize: resize})
			if err != nil || out.String() != c.want {
				t.Errorf("Attach = %v, output %q; want %q", err, out.String(), c.want)
			}
		})
	}
}

func TestStreamedAttachToAGoneMonitorFails(t *testing.T) {
	ts := newTestServer(t)
	_, id := ts.runningCtr(t, "web")
	// Recorded running, but its monitor's socket is gone.
	if _, err := ts.containers.Update(id, func(r *lifecycle.ContainerRecord) error { r.Bundle = t.TempDir(); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := (streamRuntime{ts.Server}).Attach(bg, id, streaming.Streams{Stdout: &closingBuffer{}}); err == nil || !strings.Contains(err.Error(), id) {
		t.Errorf("Attach = %v, want an error naming the container", err)
	}
}

// What the streaming server runs once the kubelet connects to a
// port-forward URL: for a host-network pod, a port of the host's loopback.
func TestStreamedPortForwardOfAHostNetworkPod(t *testing.T) {
	ts := newTestServer(t)
	cfg := podConfig("web")
	cfg.Linux.SecurityContext.NamespaceOptions.Network = runtime.NamespaceMode_NODE
	id := ts.runPod(t, cfg)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = io.Copy(conn, conn) // echo until the client's end
	}()
	client, stream := net.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- streamRuntime{ts.Server}.PortForward(bg, id, int32(l.Addr().(*net.TCPAddr).Port), stream)
	}()
	if err := client.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatalf("write to the forward: %v", err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(client, got); err != nil || string(got) != "ping" {
		t.Fatalf("read from the forward = %q, %v; want the echo", got, err)
	}
	client.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("PortForward = %v after the client closed, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("PortForward still running 10s after its client closed")
	}
	if err := (streamRuntime{ts.Server}).PortForward(bg, "feed", 80, stream); err == nil {
		t.Error("PortForward to an unknown pod succeeded")
	}
}
