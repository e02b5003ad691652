package streaming

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/minicri/minicri/internal/connlimit"
)

// track registers one stream request with the server and returns the
// writer and request to hand to the protocol servers. The request's context
// ends when the client disconnects or the server closes, which the
// request's own context does not do once the connection is hijacked: that
// is what tells the runtime to kill an exec whose client went away.
func (s *Server) track(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request, func()) {
	s.streams.Add(1)
	ctx, cancel := context.WithCancel(s.ctx)
	stop := context.AfterFunc(r.Context(), cancel) // not hijacked: the usual end
	hw := &hijackWatcher{ResponseWriter: w, s: s, gone: cancel}
	done := func() {
		stop()
		cancel()
		hw.forget()
		s.streams.Done()
	}
	return hw, r.WithContext(ctx), done
}

// hijackWatcher hands out a watchedConn when the protocol server hijacks
// the connection. It has no Unwrap on purpose: the protocol servers would
// unwrap it and hijack the raw connection.
type hijackWatcher struct {
	http.ResponseWriter
	s    *Server
	gone context.CancelFunc
	conn *watchedConn
}

func (h *hijackWatcher) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("connection cannot be hijacked")
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	// The HTTP server's request deadlines must not cut a stream, which
	// may be quiet for hours (the protocols have their own idle timeout).
	// net/http clears them at hijack today; this does not rely on it.
	if err := conn.SetDeadline(time.Time{}); err != nil {
		conn.Close()
		return nil, nil, err
	}
	wc := newWatchedConn(conn, h.gone)
	h.s.mu.Lock()
	h.s.conns[wc] = struct{}{}
	h.s.mu.Unlock()
	h.conn = wc
	// Bytes the HTTP server read ahead belong to the protocol: keep them in
	// front of the connection, which must be read through wc to be watched.
	var r io.Reader = wc
	if n := rw.Reader.Buffered(); n > 0 {
		ahead, _ := rw.Reader.Peek(n)
		r = io.MultiReader(bytes.NewReader(bytes.Clone(ahead)), wc)
	}
	return wc, bufio.NewReadWriter(bufio.NewReader(r), rw.Writer), nil
}

func (h *hijackWatcher) forget() {
	if h.conn == nil {
		return
	}
	h.s.mu.Lock()
	delete(h.s.conns, h.conn)
	h.s.mu.Unlock()
}

// Writes smaller than smallWrite are held back for the write that follows
// them, or for flushDelay at most: the SPDY framer writes each frame's
// header fields one by one, and a TCP send each (and as many reads on the
// client) would cost more than moving the data.
const (
	smallWrite = 64
	maxPending = 4 << 10
	flushDelay = 500 * time.Microsecond
)

// vectored is the connection under conn that writes several buffers in one
// system call (net.Buffers uses writev only on the net package's own
// connections): the TCP connection inside the connection limiter's
// wrapper. nil under TLS, whose records are the unit.
func vectored(conn net.Conn) net.Conn {
	if c, ok := conn.(*connlimit.Conn); ok {
		conn = c.Conn
	}
	switch conn.(type) {
	case *net.TCPConn, *net.UnixConn:
		return conn
	}
	return nil
}

func newWatchedConn(conn net.Conn, gone context.CancelFunc) *watchedConn {
	return &watchedConn{Conn: conn, gone: gone, vectored: vectored(conn)}
}

// watchedConn reports the end of a hijacked connection: the protocol
// servers read it all the time, so a failed read is a client gone. It also
// joins small writes to the next one.
type watchedConn struct {
	net.Conn
	gone     context.CancelFunc
	once     sync.Once
	vectored net.Conn // see vectored; nil: the held writes go first, alone

	wmu     sync.Mutex
	pending []byte // small writes not sent yet
	timer   *time.Timer
	armed   bool
	werr    error // a failed delayed write fails the writes after it
}

func (c *watchedConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return 0, c.werr
	}
	if len(p) < smallWrite && len(c.pending)+len(p) <= maxPending {
		c.pending = append(c.pending, p...)
		c.armFlush()
		return len(p), nil
	}
	if len(c.pending) == 0 {
		return c.Conn.Write(p)
	}
	held := len(c.pending)
	// On TCP one writev: a frame's header and its data go out together,
	// and the client wakes once for them.
	w := c.Conn
	if c.vectored != nil {
		w = c.vectored
	}
	bufs := net.Buffers{c.pending, p}
	n, err := bufs.WriteTo(w)
	c.pending = c.pending[:0]
	c.disarmFlush()
	if err != nil {
		c.werr = err
		return max(int(n)-held, 0), err
	}
	return len(p), nil
}

func (c *watchedConn) armFlush() {
	if c.armed {
		return
	}
	c.armed = true
	if c.timer == nil {
		c.timer = time.AfterFunc(flushDelay, c.flush)
		return
	}
	c.timer.Reset(flushDelay)
}

func (c *watchedConn) disarmFlush() {
	if c.armed {
		c.timer.Stop()
		c.armed = false
	}
}

// flush sends the small writes that no larger one followed.
func (c *watchedConn) flush() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.armed = false
	c.flushLocked()
}

func (c *watchedConn) flushLocked() {
	if len(c.pending) == 0 || c.werr != nil {
		return
	}
	if _, err := c.Conn.Write(c.pending); err != nil {
		c.werr = err
	}
	c.pending = c.pending[:0]
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.once.Do(c.gone)
	}
	return n, err
}

func (c *watchedConn) Close() error {
	// A client that stopped reading must not keep the last bytes, and us,
	// waiting for ever.
	_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
	c.wmu.Lock()
	c.disarmFlush()
	c.flushLocked()
	c.wmu.Unlock()
	c.once.Do(c.gone)
	return c.Conn.Close()
}
