package streaming

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// The streaming server answers anyone who can connect, before any token is
// checked, so connections that have not become streams are bounded: in
// time by the HTTP server's timeouts (a request must arrive within
// RequestTimeout, a kept-alive connection may wait IdleConnTimeout for its
// next one), and in number by connLimiter. An upgraded stream is none of
// these: it holds a token that was valid, and the timeouts no longer apply
// to it (net/http leaves a hijacked connection's deadlines alone; Hijack
// clears them).

// connLimiter is the server's TCP listener. It admits at most max
// connections at a time; at the cap, a new one takes the place of the
// oldest connection that is not doing anything (no request being read or
// served, not a stream), so that a flood of idle connections cannot keep
// the kubelet out. When every connection is busy the new one is closed.
type connLimiter struct {
	net.Listener
	max int
	log *logrus.Entry

	mu        sync.Mutex
	conns     map[*limitedConn]struct{}
	seq       uint64
	lastRefus time.Time // the last refusal logged, to log one a minute
}

func newConnLimiter(ln net.Listener, max int, log *logrus.Entry) *connLimiter {
	return &connLimiter{Listener: ln, max: max, log: log, conns: map[*limitedConn]struct{}{}}
}

// limitedConn is one admitted connection: its Close gives its place back.
type limitedConn struct {
	net.Conn
	l     *connLimiter
	seq   uint64         // order of admission
	state http.ConnState // as the HTTP server last reported it
	once  sync.Once
}

func (c *limitedConn) Close() error {
	c.once.Do(func() { c.l.forget(c) })
	return c.Conn.Close()
}

// Accept returns the next connection admitted; refused ones are closed here.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c := l.admit(conn); c != nil {
			return c, nil
		}
	}
}

func (l *connLimiter) admit(conn net.Conn) *limitedConn {
	l.mu.Lock()
	var victim *limitedConn
	if len(l.conns) >= l.max {
		victim = l.oldestIdleLocked()
		if victim == nil {
			logIt := time.Since(l.lastRefus) > time.Minute
			if logIt {
				l.lastRefus = time.Now()
			}
			l.mu.Unlock()
			if logIt {
				l.log.WithField("max_connections", l.max).Warn("streaming server: every connection is busy; refusing new ones")
			}
			conn.Close()
			return nil
		}
		delete(l.conns, victim)
	}
	l.seq++
	c := &limitedConn{Conn: conn, l: l, seq: l.seq, state: http.StateNew}
	l.conns[c] = struct{}{}
	l.mu.Unlock()
	if victim != nil {
		victim.Close()
	}
	return c
}

// oldestIdleLocked is the longest-admitted connection that is waiting for a
// request: it has not read one yet or is between two.
func (l *connLimiter) oldestIdleLocked() *limitedConn {
	var oldest *limitedConn
	for c := range l.conns {
		if (c.state == http.StateNew || c.state == http.StateIdle) && (oldest == nil || c.seq < oldest.seq) {
			oldest = c
		}
	}
	return oldest
}

func (l *connLimiter) forget(c *limitedConn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// connState is the HTTP server's ConnState hook.
func (l *connLimiter) connState(conn net.Conn, state http.ConnState) {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	c, ok := conn.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	c.state = state
	l.mu.Unlock()
}

// open is the number of connections admitted and not closed.
func (l *connLimiter) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}
