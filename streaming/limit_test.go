package streaming

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/minicri/minicri/internal/connlimit/connlimittest"
)

// dialIdle opens a connection to s and, if request is set, sends it and
// reads the answer: then the connection idles.
func dialIdle(t *testing.T, s *Server, request string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if request != "" {
		if _, err := io.WriteString(c, request); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("answer to %q: %v", request, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return c
}

// waitClosedByServer waits until the server closes c (a read ends).
func waitClosedByServer(t *testing.T, c net.Conn, within time.Duration, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s: still open after %v", what, within)
	}
}

const (
	badTokenRequest = "GET /exec/not-a-token HTTP/1.1\r\nHost: x\r\n\r\n"
	// slowBodyRequest announces a body it never sends.
	slowBodyRequest = "GET /exec/not-a-token HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"
)

// TestIdleConnectionsAreClosed: a connection that sends nothing, one that
// sends half a request, and one that asked with a bad token and kept the
// connection are all closed by the server after its timeouts.
func TestIdleConnectionsAreClosed(t *testing.T) {
	s, _ := startServer(t, Config{RequestTimeout: 300 * time.Millisecond, IdleConnTimeout: 300 * time.Millisecond})
	silent := dialIdle(t, s, "")
	half := dialIdle(t, s, "")
	io.WriteString(half, "GET /exec/x HTTP/1.1\r\nHost:")
	kept := dialIdle(t, s, badTokenRequest)
	waitClosedByServer(t, silent, 3*time.Second, "a connection that never sent a request")
	waitClosedByServer(t, half, 3*time.Second, "a connection that sent half a request")
	waitClosedByServer(t, kept, 3*time.Second, "a kept-alive connection after a 404")
	waitUntil(t, "the server to forget them", func() bool { return s.limiter.Open() == 0 })
}

// TestStreamOutlivesRequestTimeouts: an exec stream that stays quiet for
// longer than the request and idle timeouts is not cut.
func TestStreamOutlivesRequestTimeouts(t *testing.T) {
	s, _ := startServer(t, Config{RequestTimeout: 200 * time.Millisecond, IdleConnTimeout: 200 * time.Millisecond})
	for _, proto := range []string{"spdy", "websocket"} {
		t.Run(proto, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			u := execURL(t, s, ExecRequest{ContainerID: "c1", Cmd: []string{"cat"}, Stdin: true, Stdout: true})
			stdin := &slowReader{after: time.Second, data: "late\n"}
			var stdout strings.Builder
			err := executors(t, &rest.Config{}, u)[proto].StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &stdout})
			if err != nil || stdout.String() != "late\n" {
				t.Fatalf("a stream quiet for 1s (timeouts 200ms): err %v, output %q", err, stdout.String())
			}
		})
	}
}

// slowReader gives data once after a pause, then EOF.
type slowReader struct {
	after time.Duration
	data  string
	done  bool
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.done {
		return 0, io.EOF
	}
	time.Sleep(r.after)
	r.done = true
	return copy(p, r.data), nil
}

// TestConnectionCapMakesRoomForNewOnes: at the cap, idle connections give
// way to new ones, so that an exec works through a flood of them; the
// number open never passes the cap; a stream is never the one to go.
func TestConnectionCapMakesRoomForNewOnes(t *testing.T) {
	const maxConns = 20
	s, rt := startServer(t, Config{MaxConns: maxConns})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// A stream opened first, so the oldest connection of all.
	streamStillWorks := openStream(ctx, t, s, rt)

	for i := range 6 * maxConns {
		req := ""
		switch i % 3 {
		case 1:
			req = badTokenRequest
		case 2:
			req = slowBodyRequest
		}
		dialIdle(t, s, req)
		if n := s.limiter.Open(); n > maxConns {
			t.Fatalf("%d connections open, cap %d", n, maxConns)
		}
	}
	u := execURL(t, s, ExecRequest{ContainerID: "c2", Cmd: []string{"greet"}, Stdout: true})
	var out strings.Builder
	executors(t, &rest.Config{}, u)["websocket"].StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out})
	if out.String() != "hello c2\n" {
		t.Fatalf("exec through a flood of idle connections: output %q", out.String())
	}
	streamStillWorks("the stream opened before the flood")
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRequestsThatCannotStreamAreClosedAtOnce: whatever cannot become a
// stream is answered and its connection closed at once, though it announced
// a body that never comes and the request timeout is long; a refused
// request does not use up the token it carried.
func TestRequestsThatCannotStreamAreClosedAtOnce(t *testing.T) {
	s, _ := startServer(t, Config{RequestTimeout: time.Minute, IdleConnTimeout: time.Minute})
	u := mustParse(t, execURL(t, s, ExecRequest{ContainerID: "c1", Cmd: []string{"greet"}, Stdout: true}))
	token := u.Path
	cases := []struct {
		name, request string
		code          int
	}{
		{"unknown token, body announced", slowBodyRequest, http.StatusBadRequest},
		{"unknown token", badTokenRequest, http.StatusNotFound},
		{"valid token, body announced", "POST " + token + " HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n", http.StatusBadRequest},
		{"valid token, chunked body", "POST " + token + " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", http.StatusBadRequest},
		{"wrong method", "PUT " + token + " HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n", http.StatusMethodNotAllowed},
		{"unknown path", "GET /debug/x HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := connlimittest.Exchange(s.Addr().String(), tc.request, 5*time.Second)
			if err != nil {
				t.Fatalf("%v (request timeout 1m)", err)
			}
			if a.Code != tc.code {
				t.Errorf("status %d, want %d", a.Code, tc.code)
			}
			if !a.Closed {
				t.Errorf("the connection is still open after the answer")
			}
		})
	}
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	executors(t, &rest.Config{}, u.String())["spdy"].StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out})
	if out.String() != "hello c1\n" {
		t.Fatalf("the token after refused requests that carried it: output %q", out.String())
	}
}

// TestWaitingConnectionsGiveWayOldestFirst: past MaxWaitingConns
// connections that sent half a request and stopped (a slowloris: silent
// ones wait in the kernel, TCP_DEFER_ACCEPT, and reach the server in no
// order), the one waiting longest is closed for each new one, and a stream
// older than all of them is never; the stream still works after.
func TestWaitingConnectionsGiveWayOldestFirst(t *testing.T) {
	const maxWaiting = 4
	s, rt := startServer(t, Config{MaxWaitingConns: maxWaiting})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	streamStillWorks := openStream(ctx, t, s, rt)

	var silent []net.Conn
	for range 3 * maxWaiting {
		c := dialIdle(t, s, "")
		io.WriteString(c, "GET /exec/x HTTP/1.1\r\nHost:")
		silent = append(silent, c)
		if n := s.limiter.Waiting(); n > maxWaiting {
			t.Fatalf("%d connections waiting, cap %d", n, maxWaiting)
		}
	}
	for i, c := range silent[:len(silent)-maxWaiting] {
		waitClosedByServer(t, c, 5*time.Second, fmt.Sprintf("silent connection %d of %d", i+1, len(silent)))
	}
	for i, c := range silent[len(silent)-maxWaiting:] {
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("one of the %d youngest silent connections (%d) was closed: %v", maxWaiting, i, err)
		}
	}
	streamStillWorks("the stream opened before the silent connections")
}

// openStream starts an exec of cat over SPDY and returns once it runs; the
// function it returns sends a line through it, ends it and fails the test,
// naming it what, unless the line came back.
func openStream(ctx context.Context, t *testing.T, s *Server, rt *fakeRuntime) func(what string) {
	t.Helper()
	stream := execURL(t, s, ExecRequest{ContainerID: "c1", Cmd: []string{"cat"}, Stdin: true, Stdout: true})
	pr, pw := io.Pipe()
	var streamed strings.Builder
	streamDone := make(chan error, 1)
	go func() {
		streamDone <- executors(t, &rest.Config{}, stream)["spdy"].StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: pr, Stdout: &streamed})
	}()
	<-rt.started
	return func(what string) {
		t.Helper()
		io.WriteString(pw, "still here\n")
		pw.Close()
		if err := <-streamDone; err != nil || streamed.String() != "still here\n" {
			t.Fatalf("%s: err %v, output %q", what, err, streamed.String())
		}
	}
}
