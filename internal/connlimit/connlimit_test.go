package connlimit

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/minicri/minicri/internal/connlimit/connlimittest"
)

// pair is one connection as both ends see it.
type pair struct {
	client net.Conn
	server *Conn
}

// harness is a Listener on loopback whose connections the test accepts.
type harness struct {
	t *testing.T
	l *Listener
}

func newHarness(t *testing.T, lim Limits) *harness {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Not a *net.TCPListener, so no TCP_DEFER_ACCEPT: the test's silent
	// connections reach Accept at once, in order.
	l := New(struct{ net.Listener }{ln}, lim, logrus.NewEntry(logrus.New()))
	t.Cleanup(func() { l.Close() })
	return &harness{t: t, l: l}
}

// dial opens a connection and returns it once admitted, or with a nil
// server end when it was refused.
func (h *harness) dial() pair {
	h.t.Helper()
	c, err := net.Dial("tcp", h.l.Addr().String())
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		conn, err := h.l.Listener.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		if sc := h.l.admit(conn); sc != nil {
			accepted <- sc
			return
		}
		accepted <- nil
	}()
	select {
	case sc := <-accepted:
		p := pair{client: c}
		if sc != nil {
			p.server = sc.(*Conn)
			h.t.Cleanup(func() { sc.Close() })
		}
		return p
	case <-time.After(5 * time.Second):
		h.t.Fatal("accept did not return")
	}
	return pair{}
}

// closedByServer reports whether the server closed the client's connection.
func closedByServer(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return true
}

// TestEvictionOrder: at either cap the connection waiting longest makes
// room, or one idle after an answer before one that has not waited MinWait;
// a busy or hijacked connection, however old, never does; when all are busy
// the new connection is refused. (admit is called directly: makeRoom's
// wait for MinWait is TestAtTheCapAcceptWaitsForMinWait's.)
func TestEvictionOrder(t *testing.T) {
	h := newHarness(t, Limits{Max: 4, MaxWaiting: 2, MinWait: time.Minute})
	stream := h.dial() // the oldest of all, then upgraded
	h.l.ConnState(stream.server, http.StateActive)
	h.l.ConnState(stream.server, http.StateHijacked)
	first, second := h.dial(), h.dial()
	if got := h.l.Waiting(); got != 2 {
		t.Fatalf("%d waiting, want 2", got)
	}

	// The waiting budget is full: the first waiting goes, not the stream.
	third := h.dial()
	if !closedByServer(t, first.client) {
		t.Fatal("at the waiting cap, the oldest waiting connection is still open")
	}
	if closedByServer(t, stream.client) || closedByServer(t, second.client) {
		t.Fatal("at the waiting cap, the stream or a younger waiting connection was closed")
	}

	// A connection kept alive after its answer waits again, younger than
	// third, but goes first: third has not waited MinWait, and second lost
	// no request.
	h.l.ConnState(second.server, http.StateActive)
	h.l.ConnState(second.server, http.StateIdle)
	younger := h.dial()
	if !closedByServer(t, second.client) {
		t.Fatal("the connection idle after its answer is still open")
	}
	if closedByServer(t, third.client) {
		t.Fatal("a connection that had not waited MinWait went before one idle after its answer")
	}

	// All busy at the total cap: the newcomer is refused.
	h.l.ConnState(third.server, http.StateActive)
	h.l.ConnState(younger.server, http.StateActive)
	h.l.ConnState(h.dial().server, http.StateActive)
	if h.l.Open() != 4 || h.l.Waiting() != 0 {
		t.Fatalf("open %d waiting %d, want 4 and 0", h.l.Open(), h.l.Waiting())
	}
	if refused := h.dial(); refused.server != nil || !closedByServer(t, refused.client) {
		t.Fatal("a connection was admitted while every one was busy at the cap")
	}
	if closedByServer(t, stream.client) {
		t.Fatal("the stream was closed")
	}
	if h.l.Open() != 4 {
		t.Fatalf("%d open, cap 4", h.l.Open())
	}
}

// TestCloseGivesThePlaceBack: a connection closed by either side, or twice,
// counts once.
func TestCloseGivesThePlaceBack(t *testing.T) {
	h := newHarness(t, Limits{Max: 2, MaxWaiting: 2})
	a, b := h.dial(), h.dial()
	h.l.ConnState(b.server, http.StateHijacked)
	a.server.Close()
	a.server.Close()
	h.l.ConnState(a.server, http.StateClosed)
	b.server.Close()
	if h.l.Open() != 0 || h.l.Waiting() != 0 {
		t.Fatalf("open %d waiting %d after closing all, want 0", h.l.Open(), h.l.Waiting())
	}
}

// TestRefusalsDoNotReadTheBody: requests Bodiless turns away are answered
// and closed at once, though the body they announce never comes; a
// bodiless request with the right method is served.
func TestRefusalsDoNotReadTheBody(t *testing.T) {
	h := Bodiless(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "served") }), "GET")
	srv := &http.Server{Handler: h, ReadTimeout: time.Minute}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	cases := []struct {
		name, request string
		code          int
	}{
		{"content-length", "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n", 400},
		{"chunked", "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		{"wrong method", "PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n", 405},
		{"bodiless", "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A short wait: a served bodiless request keeps its connection.
			a, err := connlimittest.Exchange(ln.Addr().String(), tc.request, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if a.Code != tc.code {
				t.Fatalf("status %d %q, want %d", a.Code, a.Body, tc.code)
			}
			if tc.code != 200 && !a.Closed {
				t.Fatalf("after the refusal the connection was not closed")
			}
		})
	}
}

// TestAtTheCapAcceptWaitsForMinWait: at the waiting cap a new connection
// stays in the kernel's backlog until the longest waiting one has waited
// MinWait (then pushes it out), or until a waiting one is served.
func TestAtTheCapAcceptWaitsForMinWait(t *testing.T) {
	const minWait = 300 * time.Millisecond
	h := newHarness(t, Limits{Max: 10, MaxWaiting: 2, MinWait: minWait})
	accepted := make(chan *Conn, 10)
	go func() {
		for {
			c, err := h.l.Accept()
			if err != nil {
				return
			}
			accepted <- c.(*Conn)
		}
	}()
	next := func(within time.Duration) *Conn {
		t.Helper()
		select {
		case c := <-accepted:
			t.Cleanup(func() { c.Close() })
			return c
		case <-time.After(within):
			return nil
		}
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", h.l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// The clock starts before the dial: the listener may accept the
	// connection, and start its wait, before a dial returns.
	start := time.Now()
	first := dial()
	if next(5*time.Second) == nil {
		t.Fatal("first connection not accepted")
	}
	dial()
	second := next(5 * time.Second)
	dial()
	if next(minWait/3) != nil {
		t.Fatal("at the waiting cap, a connection was accepted before the longest waiting one waited MinWait")
	}
	third := next(5 * time.Second)
	if third == nil {
		t.Fatal("the third connection was never accepted")
	}
	if waited := time.Since(start); waited < minWait {
		t.Fatalf("accepted after %v, want at least MinWait %v", waited, minWait)
	}
	if !closedByServer(t, first) {
		t.Fatal("the connection waiting longest was not pushed out")
	}

	// A waiting connection that is served frees its place at once, for a
	// connection the cap holds back.
	h.l.ConnState(second, http.StateActive)
	fourthClient := dial()
	fourth := next(minWait / 3)
	if fourth == nil {
		t.Fatal("below the waiting cap, a connection was not accepted at once")
	}
	dial()
	if next(minWait/6) != nil {
		t.Fatal("at the waiting cap, a connection was accepted at once")
	}
	h.l.ConnState(third, http.StateActive)
	if next(minWait/6) == nil {
		t.Fatal("a place freed by a served connection did not admit the one held back at once")
	}

	// One idle after its answer makes room at once.
	h.l.ConnState(fourth, http.StateActive)
	h.l.ConnState(fourth, http.StateIdle)
	dial()
	if next(minWait/6) == nil {
		t.Fatal("at the waiting cap with a connection idle after its answer, a new one was not accepted at once")
	}
	if !closedByServer(t, fourthClient) {
		t.Fatal("the idle connection was not the one pushed out")
	}
}

// TestUnreadRequestIsNotPushedOut: a connection whose request is in the
// kernel, not read yet (its goroutine has not run), is not pushed out
// however long it waited; a silent one younger than it is; once its request
// is read and no more comes, it may go too.
func TestUnreadRequestIsNotPushedOut(t *testing.T) {
	const request = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	h := newHarness(t, Limits{Max: 10, MaxWaiting: 2, MinWait: 50 * time.Millisecond})
	asked, silent := h.dial(), h.dial()
	io.WriteString(asked.client, request)
	victim := func() *Conn {
		h.l.mu.Lock()
		defer h.l.mu.Unlock()
		v, _ := h.l.victimLocked()
		return v
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting for %s", what)
			}
		}
	}
	waitFor("the request to arrive", func() bool { return unread(asked.server.Conn) })
	waitFor("the silent connection to wait MinWait", func() bool { return victim() != nil })
	if v := victim(); v != silent.server {
		t.Fatalf("the victim is %p, want the silent connection %p, not the one with a request unread %p", v, silent.server, asked.server)
	}
	if _, err := io.ReadFull(asked.server, make([]byte, len(request))); err != nil {
		t.Fatal(err)
	}
	silent.server.Close()
	// Read, and not yet said to be busy: its goroutine is parsing the
	// request (on a loaded node that can take long), which must not be
	// lost.
	if v := victim(); v != nil {
		t.Fatalf("after its request was read, and before the server says it is busy, the victim is %p, want none", v)
	}
	// Blocked for more of a request it began: half a request, which goes.
	go func() { _, _ = asked.server.Read(make([]byte, 1)) }()
	waitFor("the connection to block for more", func() bool { return victim() == asked.server })
}

// TestHalfARequestIsPushedOut: a connection that sent part of a request
// and waits for the rest (slow headers) goes like a silent one once it has
// waited MinWait, though its bytes were read.
func TestHalfARequestIsPushedOut(t *testing.T) {
	h := newHarness(t, Limits{Max: 10, MaxWaiting: 1, MinWait: 20 * time.Millisecond})
	slow := h.dial()
	io.WriteString(slow.client, "GET / HTTP/1.1\r\nHost:")
	read := make(chan error, 1)
	go func() {
		// The first read takes the half request; the second blocks.
		if _, err := slow.server.Read(make([]byte, 64)); err != nil {
			read <- err
			return
		}
		_, err := slow.server.Read(make([]byte, 64))
		read <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.l.mu.Lock()
		v, _ := h.l.victimLocked()
		h.l.mu.Unlock()
		if v == slow.server {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection blocked on half a request was never a victim")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if fresh := h.dial(); fresh.server == nil {
		t.Fatal("the new connection was refused; want it to push out the half request")
	}
	if !closedByServer(t, slow.client) {
		t.Error("the half request's connection is still open")
	}
	select {
	case err := <-read:
		if err == nil {
			t.Error("the blocked read returned no error after its connection was pushed out")
		}
	case <-time.After(5 * time.Second):
		t.Error("the blocked read did not return after its connection was pushed out")
	}
}

// TestWatchedReadKeepsTheConnSemantics: while a connection waits, its
// reads go through the poller under the listener's lock; a deadline, the
// peer's close and data still read as a net.Conn's.
func TestWatchedReadKeepsTheConnSemantics(t *testing.T) {
	h := newHarness(t, Limits{Max: 10, MaxWaiting: 10})
	p := h.dial()
	buf := make([]byte, 8)
	p.server.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := p.server.Read(buf)
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	p.server.SetReadDeadline(time.Time{})
	io.WriteString(p.client, "abc")
	if n, err := p.server.Read(buf); err != nil || string(buf[:n]) != "abc" {
		t.Fatalf("read %q, %v; want abc", buf[:n], err)
	}
	p.client.Close()
	if _, err := p.server.Read(buf); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want io.EOF", err)
	}
}

// TestSilentConnectionsWaitInTheKernel: on TCP, a connection that says
// nothing reaches Accept only after deferAccept, and one that sends its
// request at once goes before it.
func TestSilentConnectionsWaitInTheKernel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(ln, Limits{Max: 10, MaxWaiting: 10}, logrus.NewEntry(logrus.New()))
	defer l.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	start := time.Now()
	silent, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	talker, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer talker.Close()
	io.WriteString(talker, "GET / HTTP/1.1\r\n")
	for i, want := range []net.Conn{talker, silent} {
		select {
		case c := <-accepted:
			defer c.Close()
			if c.RemoteAddr().String() != want.LocalAddr().String() {
				t.Fatalf("accepted %d: %v, want %v (the talker first)", i, c.RemoteAddr(), want.LocalAddr())
			}
			if want == silent && time.Since(start) < 900*time.Millisecond {
				t.Fatalf("the silent connection was accepted after %v, before TCP_DEFER_ACCEPT's %ds", time.Since(start), deferAccept)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("connection %d not accepted within 10s", i)
		}
	}
}
