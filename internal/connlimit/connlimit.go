// Package connlimit bounds the connections of an HTTP server that anyone who
// reaches its address may open: the streaming server (exec, attach,
// port-forward), the metrics and the profiles. Such a stranger can open
// connections and say nothing, or half a request; the server must not keep
// them all, and must not let them push out a connection that is doing
// something (a stream, a request being served).
//
// Listener counts every connection it admits and knows, from the HTTP
// server's ConnState hook, which of them are waiting: waiting for their
// request's headers, or kept alive between two requests. Waiting connections
// have a budget of their own (Limits.MaxWaiting) inside the total
// (Limits.Max); at either cap a new connection takes the place of a waiting
// one, as below. A connection being served, or hijacked (an upgraded
// stream), is never pushed out: when every connection is busy and the total
// is reached, the new one is closed. On TCP, silent connections do not even
// reach Accept for a second (TCP_DEFER_ACCEPT, see New).
//
// At a cap, Accept does not take the next connection from the kernel until
// a waiting one may go: one idle after an answer (it lost no request), or
// one that has waited Limits.MinWait and has no request in the kernel for
// its goroutine to read. A waiting connection whose goroutine has read
// bytes of a request and is not blocked for more is taking that request in
// (the HTTP server says it is busy only once its headers are parsed): it
// does not go either, however long its goroutine took to run. One blocked
// for the rest of a request it began does: that is a slow client's, or an
// attacker's, half a request. Meanwhile new connections queue in the kernel's
// backlog, in the order they came, and are served in that order. Without
// that, a flood of connections that are answered at once (a refused
// request) but arrive faster than they are served would push out every
// connection, the kubelet's too, before its request is read (on a loaded
// node a goroutine may wait long to run); the eviction is for the silent
// connections it is meant for.
//
// Refuse and Bodiless answer the requests that will never be served without
// reading a body they announce, so that a request whose body never comes
// does not keep its connection busy.
package connlimit

import (
	"container/list"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// Limits bounds a Listener's connections.
type Limits struct {
	// Max is the connections open at once, busy ones included.
	Max int
	// MaxWaiting is the connections open at once that are waiting for a
	// request. It is at most Max.
	MaxWaiting int
	// MinWait is how long a connection waits before it may be pushed out
	// by a new one; 0 is DefaultMinWait.
	MinWait time.Duration
}

// DefaultMinWait is far more than a client that sends its request as it
// connects needs to have it read, on a loaded node.
const DefaultMinWait = 100 * time.Millisecond

// Listener admits connections within its Limits. Its ConnState method must
// be the HTTP server's ConnState hook.
type Listener struct {
	net.Listener
	lim Limits
	log *logrus.Entry

	freed  chan struct{} // there may be room: see wake
	closed chan struct{}
	once   sync.Once

	mu      sync.Mutex
	open    int
	waiting *list.List // of *Conn, the longest waiting first
	refused time.Time  // the last refusal logged, to log one a minute
}

// deferAccept is TCP_DEFER_ACCEPT's wait, in seconds: a TCP connection
// reaches Accept when its first bytes arrive, or after this if none do.
const deferAccept = 1

// New wraps ln; log says which server refused connections. A TCP listener
// is made to defer its connections until they send something
// (TCP_DEFER_ACCEPT): a silent one waits that second in the kernel, with no
// descriptor nor goroutine of ours, and one that has sent its request
// (whose client may well be slow to do it on a loaded node) never reaches
// Accept silent, so it is never taken for a silent one and pushed out.
func New(ln net.Listener, lim Limits, log *logrus.Entry) *Listener {
	if tl, ok := ln.(*net.TCPListener); ok {
		if err := setDeferAccept(tl); err != nil {
			log.WithError(err).Warn("TCP_DEFER_ACCEPT not set: silent connections reach the server at once")
		}
	}
	lim.MaxWaiting = min(max(lim.MaxWaiting, 1), lim.Max)
	if lim.MinWait <= 0 {
		lim.MinWait = DefaultMinWait
	}
	return &Listener{Listener: ln, lim: lim, log: log, waiting: list.New(),
		freed: make(chan struct{}, 1), closed: make(chan struct{})}
}

// Close stops accepting; connections already accepted stay open.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// Conn is one admitted connection: its Close gives its place back.
type Conn struct {
	net.Conn
	l      *Listener
	closed bool          // counted out of l.open; under l.mu
	elem   *list.Element // in l.waiting while waiting; under l.mu
	since  time.Time     // when it began to wait; under l.mu
	idle   bool          // waiting after an answer, not for a first request; under l.mu
	once   sync.Once

	// While the connection waits, its reads are watched (readWatched):
	// read is set when one took bytes since it began to wait, blocked
	// while its goroutine waits in a read for bytes that have not come.
	// Both under l.mu; watched mirrors elem != nil for Read, which only
	// the connection's own goroutine calls.
	watched atomic.Bool
	read    bool
	blocked bool
}

// Read reads as the connection's net.Conn does; while the connection
// waits for a request, the read and what it tells victimLocked are one
// step under l.mu, so that a request taken off the kernel is never taken
// for silence.
func (c *Conn) Read(b []byte) (int, error) {
	if !c.watched.Load() {
		return c.Conn.Read(b)
	}
	sc, ok := c.Conn.(syscall.Conn)
	if !ok || len(b) == 0 {
		n, err := c.Conn.Read(b)
		c.l.mu.Lock()
		c.read = c.read || n > 0
		c.l.mu.Unlock()
		return n, err
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c.Conn.Read(b)
	}
	return c.readWatched(raw, b)
}

// readWatched is one read of raw into b, through the poller as the
// net.Conn's own read goes (its deadline holds), each try under l.mu.
func (c *Conn) readWatched(raw syscall.RawConn, b []byte) (int, error) {
	var n int
	var rerr error
	err := raw.Read(func(fd uintptr) bool {
		c.l.mu.Lock()
		defer c.l.mu.Unlock()
		for {
			n, rerr = unix.Read(int(fd), b)
			if rerr != unix.EINTR {
				break
			}
		}
		if rerr == unix.EAGAIN {
			c.blocked = true
			return false // wait until readable, then try again
		}
		c.blocked = false
		c.read = c.read || n > 0
		return true
	})
	switch {
	case err != nil:
		return 0, &net.OpError{Op: "read", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	case rerr != nil:
		return 0, &net.OpError{Op: "read", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: rerr}
	case n <= 0:
		return 0, io.EOF
	}
	return n, nil
}

// takingRequestLocked reports whether c's goroutine has read bytes of a
// request since c began to wait and is not blocked for more: it is
// parsing them, and the HTTP server will say so.
func (c *Conn) takingRequestLocked() bool { return c.read && !c.blocked }

// Close closes the connection and gives its place back.
func (c *Conn) Close() error {
	c.once.Do(c.l.forget(c))
	return c.Conn.Close()
}

// Accept returns the next connection admitted; refused ones are closed here.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		if err := l.makeRoom(); err != nil {
			return nil, err
		}
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c := l.admit(conn); c != nil {
			return c, nil
		}
	}
}

// makeRoom returns when a connection may be accepted: below the caps, or
// when a waiting connection may be pushed out (victimLocked), or when none
// waits (admit refuses the new one).
func (l *Listener) makeRoom() error {
	for {
		l.mu.Lock()
		wait := time.Duration(0)
		if l.fullLocked() {
			_, wait = l.victimLocked()
		}
		l.mu.Unlock()
		if wait <= 0 {
			return nil
		}
		timer := time.NewTimer(wait)
		select {
		case <-l.freed:
		case <-timer.C:
		case <-l.closed:
			timer.Stop()
			return net.ErrClosed
		}
		timer.Stop()
	}
}

func (l *Listener) fullLocked() bool {
	return l.open >= l.lim.Max || l.waiting.Len() >= l.lim.MaxWaiting
}

// victimLocked is the connection a new one would push out, the first in
// the order they began to wait that is either idle after an answer (it was
// served, and loses no request) or silent after waiting MinWait: no request
// of its is in the kernel, unread (one that is there only waits for its
// goroutine, on a loaded node, and will be served). When none is, it
// returns when to look again (0 when none waits).
func (l *Listener) victimLocked() (*Conn, time.Duration) {
	retry := time.Duration(0)
	for e := l.waiting.Front(); e != nil; e = e.Next() {
		c := e.Value.(*Conn)
		if c.takingRequestLocked() {
			continue
		}
		if c.idle {
			return c, 0
		}
		if wait := l.lim.MinWait - time.Since(c.since); wait > 0 {
			if retry == 0 {
				retry = wait
			}
			continue
		}
		if !unread(c.Conn) {
			return c, 0
		}
	}
	if retry == 0 && l.waiting.Len() > 0 {
		retry = l.lim.MinWait // all have their request in: some will be served
	}
	return nil, retry
}

func setDeferAccept(l *net.TCPListener) error {
	raw, err := l.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, deferAccept)
	}); err != nil {
		return err
	}
	return serr
}

// unread reports whether the kernel holds bytes that conn's reader has not
// read yet.
func unread(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	_ = raw.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}

// admit counts conn in, pushing out a waiting connection at the caps; when
// none waits, conn is closed and admit returns nil.
func (l *Listener) admit(conn net.Conn) *Conn {
	l.mu.Lock()
	var victim *Conn
	if l.fullLocked() {
		front := l.waiting.Front()
		if front == nil {
			logIt := time.Since(l.refused) > time.Minute
			if logIt {
				l.refused = time.Now()
			}
			l.mu.Unlock()
			if logIt {
				l.log.WithField("max_connections", l.lim.Max).Warn("every connection is busy; refusing new ones")
			}
			conn.Close()
			return nil
		}
		// makeRoom waited for a victim; only a caller that did not wait
		// (a test) finds none, and has the longest waiting go.
		victim, _ = l.victimLocked()
		if victim == nil {
			victim = front.Value.(*Conn)
		}
		l.forgetLocked(victim)
	}
	c := &Conn{Conn: conn, l: l}
	l.open++
	l.wait(c)
	l.mu.Unlock()
	if victim != nil {
		victim.Close()
	}
	return c
}

// forget returns the function that gives c's place back (for c.once).
func (l *Listener) forget(c *Conn) func() {
	return func() {
		l.mu.Lock()
		l.forgetLocked(c)
		l.mu.Unlock()
	}
}

func (l *Listener) forgetLocked(c *Conn) {
	if c.closed {
		return
	}
	c.closed = true
	l.open--
	l.stopWaiting(c)
	l.wake()
}

// wait puts c in the waiting list; one idle after an answer may be pushed
// out at once, which makeRoom must hear of.
func (l *Listener) wait(c *Conn) {
	c.since = time.Now()
	c.read, c.blocked = false, false
	c.elem = l.waiting.PushBack(c)
	c.watched.Store(true)
	if c.idle {
		l.wake()
	}
}

// stopWaiting takes c out of the waiting list, and wakes makeRoom.
func (l *Listener) stopWaiting(c *Conn) {
	if c.elem == nil {
		return
	}
	l.waiting.Remove(c.elem)
	c.elem = nil
	c.watched.Store(false)
	l.wake()
}

// wake tells makeRoom that there may be room now.
func (l *Listener) wake() {
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

// ConnState is the HTTP server's ConnState hook: a connection waits while
// it is new or idle, and is busy while a request is served or once it is
// hijacked.
func (l *Listener) ConnState(conn net.Conn, state http.ConnState) {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	c, ok := conn.(*Conn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.closed {
		return
	}
	c.idle = state == http.StateIdle
	switch wait := state == http.StateNew || state == http.StateIdle; {
	case wait && c.elem == nil:
		l.wait(c)
	case !wait:
		l.stopWaiting(c)
	}
}

// Open is the number of connections admitted and not closed.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Waiting is the number of open connections waiting for a request.
func (l *Listener) Waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiting.Len()
}

// refuseWrite bounds the writing of a refusal to a client that does not read.
const refuseWrite = time.Second

// Refuse answers the request with code and a one-line body, and closes the
// connection at once: a body the request announced is not read (nor waited
// for). The connection is hijacked to do that; where it cannot be, the
// answer says Connection: close.
func Refuse(w http.ResponseWriter, code int) {
	text := strconv.Itoa(code) + " " + http.StatusText(code) + "\n"
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		w.Header().Set("Connection", "close")
		http.Error(w, text, code)
		return
	}
	defer conn.Close()
	_ = conn.SetWriteDeadline(time.Now().Add(refuseWrite))
	_, _ = conn.Write([]byte("HTTP/1.1 " + strconv.Itoa(code) + " " + http.StatusText(code) + "\r\n" +
		"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n" +
		"Content-Length: " + strconv.Itoa(len(text)) + "\r\n\r\n" + text))
}

// Bodiless serves only requests with one of methods and no body (no
// Content-Length but 0, no Transfer-Encoding); the others are refused at
// once (Refuse), before next sees them.
func Bodiless(next http.Handler, methods ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case !slices.Contains(methods, r.Method):
			Refuse(w, http.StatusMethodNotAllowed)
		case r.ContentLength != 0 || len(r.TransferEncoding) > 0:
			Refuse(w, http.StatusBadRequest)
		default:
			next.ServeHTTP(w, r)
		}
	})
}
