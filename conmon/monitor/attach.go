package monitor

import (
	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon/wire"
)

// maxPending bounds what the monitor holds for one attach client that reads
// slower than the container writes. Past it the client is dropped: the log
// and the container must not wait for anyone.
const maxPending = 1 << 20

// pauseReadingAt is the backlog at which the monitor stops reading a
// client's stdin: output that echoes input (a shell, cat) then slows down
// with the client instead of running into maxPending.
const pauseReadingAt = maxPending / 4

// maxStdinPending bounds stdin bytes waiting for the container to read.
// While any wait, no client's socket is read, which pushes back on clients.
const maxStdinPending = 4 * wire.MaxPayload

type client struct {
	fd           int
	events       uint32   // what epoll waits for on fd
	pending      [][]byte // frames not yet sent, oldest first
	pendingBytes int
	usedStdin    bool // this session sent stdin: its end ends stdin-once
}

func (m *monitor) client(fd int) *client {
	for _, c := range m.clients {
		if c.fd == fd {
			return c
		}
	}
	return nil
}

func (m *monitor) acceptClient() {
	fd, _, err := unix.Accept4(m.attachFD, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
	if err != nil {
		return
	}
	c := &client{fd: fd}
	c.events = m.clientEvents(c)
	if m.epoll(unix.EPOLL_CTL_ADD, fd, c.events) != nil {
		unix.Close(fd)
		return
	}
	m.clients = append(m.clients, c)
}

// clientEvents is what the loop waits for on a client: its frames, unless
// stdin or the client's own output is backed up, and room to send when
// frames are pending.
func (m *monitor) clientEvents(c *client) uint32 {
	var ev uint32
	if len(m.stdinPending) == 0 && c.pendingBytes < pauseReadingAt {
		ev |= unix.EPOLLIN
	}
	if len(c.pending) > 0 {
		ev |= unix.EPOLLOUT
	}
	return ev
}

// updateClient tells epoll when what the loop waits for on c changed.
func (m *monitor) updateClient(c *client) {
	if ev := m.clientEvents(c); ev != c.events {
		m.epoll(unix.EPOLL_CTL_MOD, c.fd, ev)
		c.events = ev
	}
}

func (m *monitor) serveClient(c *client, events uint32) {
	if events&unix.EPOLLOUT != 0 && !m.sendPending(c) {
		return
	}
	if events&unix.EPOLLIN != 0 {
		m.readClient(c)
		return
	}
	if events&(unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		m.dropClient(c)
	}
}

func (m *monitor) readClient(c *client) {
	n, err := unix.Read(c.fd, m.buf)
	if err == unix.EAGAIN || err == unix.EINTR {
		return
	}
	if n <= 0 || err != nil {
		m.dropClient(c)
		return
	}
	frame, payload := m.buf[0], m.buf[1:n]
	switch frame {
	case wire.FrameStdin:
		c.usedStdin = true
		m.writeStdin(payload)
	case wire.FrameStdinClose:
		c.usedStdin = true
		m.endStdinSession()
	case wire.FrameResize:
		m.resize(payload)
	}
}

func (m *monitor) dropClient(c *client) {
	unix.EpollCtl(m.epfd, unix.EPOLL_CTL_DEL, c.fd, nil)
	closeConn(c.fd)
	for i, other := range m.clients {
		if other == c {
			m.clients = append(m.clients[:i], m.clients[i+1:]...)
			break
		}
	}
	if c.usedStdin {
		m.endStdinSession()
	}
}

// closeConn ends a connection in order. A unix socket closed while bytes
// its peer sent are still unread resets the connection: the peer's next
// read fails with ECONNRESET, ahead of the output and the end of file that
// wait for it. An attach client that still sends stdin or a resize as the
// container exits would see its session fail. So the monitor first makes
// the peer's further sends fail (SHUT_RD: they get EPIPE), discards what
// already came, and only then closes: the peer reads what was sent, then
// end of file.
func closeConn(fd int) {
	unix.Shutdown(fd, unix.SHUT_RD)
	var b [1]byte
	for {
		// MSG_TRUNC drops the rest of each SOCK_SEQPACKET message.
		n, _, err := unix.Recvfrom(fd, b[:], unix.MSG_DONTWAIT|unix.MSG_TRUNC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			break
		}
	}
	unix.Close(fd)
}

// closeListener stops a listening socket in order: no new connection gets
// in (a connect to a shut-down listener is refused, as to a closed one), and
// the connections still waiting to be accepted are accepted and closed with
// closeConn. Closing a listener resets the connections in its backlog, and
// their clients' reads fail with ECONNRESET instead of seeing the end.
func closeListener(fd int) {
	unix.Shutdown(fd, unix.SHUT_RD)
	for {
		conn, _, err := unix.Accept4(fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err == unix.EINTR || err == unix.ECONNABORTED {
			continue
		}
		if err != nil {
			break
		}
		closeConn(conn)
	}
	unix.Close(fd)
}

// broadcast sends one output frame to every client. A client that cannot
// take it now gets a copy queued; one too far behind is dropped.
func (m *monitor) broadcast(frame []byte) {
	for i := 0; i < len(m.clients); i++ {
		c := m.clients[i]
		if len(c.pending) == 0 {
			err := send(c.fd, frame)
			if err == nil {
				continue
			}
			if err != unix.EAGAIN {
				m.dropClient(c)
				i--
				continue
			}
		}
		if c.pendingBytes+len(frame) > maxPending {
			m.dropClient(c)
			i--
			continue
		}
		c.pending = append(c.pending, append([]byte(nil), frame...))
		c.pendingBytes += len(frame)
		m.updateClient(c)
	}
}

// sendPending sends queued frames until the socket is full again. It
// reports whether the client is still there.
func (m *monitor) sendPending(c *client) bool {
	for len(c.pending) > 0 {
		err := send(c.fd, c.pending[0])
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			m.dropClient(c)
			return false
		}
		c.pendingBytes -= len(c.pending[0])
		c.pending[0] = nil
		c.pending = c.pending[1:]
	}
	if len(c.pending) == 0 {
		c.pending = nil // let the queue's memory go
	}
	m.updateClient(c)
	return true
}

// send sends one frame: SOCK_SEQPACKET takes all of it or none.
func send(fd int, frame []byte) error {
	for {
		err := unix.Sendto(fd, frame, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, nil)
		if err != unix.EINTR {
			return err
		}
	}
}

// writeStdin passes a client's bytes to the container. What the container
// does not take now waits, and no client is read until it is gone.
func (m *monitor) writeStdin(p []byte) {
	if m.stdin < 0 || !m.cfg.Stdin || len(p) == 0 {
		return
	}
	if len(m.stdinPending) > 0 {
		if len(m.stdinPending)+len(p) <= maxStdinPending {
			m.stdinPending = append(m.stdinPending, p...)
		}
		return
	}
	n, err := unix.Write(m.stdin, p)
	if err != nil && err != unix.EAGAIN && err != unix.EINTR {
		m.closeStdin() // the container closed its stdin, or is gone
		return
	}
	n = max(n, 0)
	if n < len(p) {
		m.stdinPending = append(m.stdinPending[:0], p[n:]...)
		m.stdinBackedUp(true)
	}
}

// flushStdin runs when stdin became writable (or its reader went away).
func (m *monitor) flushStdin() {
	if m.stdin < 0 || len(m.stdinPending) == 0 {
		return
	}
	n, err := unix.Write(m.stdin, m.stdinPending)
	if err != nil && err != unix.EAGAIN && err != unix.EINTR {
		m.closeStdin()
		return
	}
	n = max(n, 0)
	m.stdinPending = m.stdinPending[n:]
	if len(m.stdinPending) == 0 {
		m.stdinPending = nil
		m.stdinBackedUp(false)
		if m.stdinCloseAfterFlush {
			m.closeStdin()
		}
	}
}

// stdinBackedUp switches between waiting for stdin to drain and reading
// clients again.
func (m *monitor) stdinBackedUp(backedUp bool) {
	var out uint32
	if backedUp {
		out = unix.EPOLLOUT
	}
	switch {
	case m.stdin == m.stdout.fd: // a pty master: one registration for both ways
		m.epoll(unix.EPOLL_CTL_MOD, m.stdin, unix.EPOLLIN|out)
	case backedUp && !m.stdinWatched:
		m.stdinWatched = m.epoll(unix.EPOLL_CTL_ADD, m.stdin, out) == nil
	case !backedUp && m.stdinWatched:
		unix.EpollCtl(m.epfd, unix.EPOLL_CTL_DEL, m.stdin, nil)
		m.stdinWatched = false
	}
	for _, c := range m.clients {
		m.updateClient(c)
	}
}

// endStdinSession ends the container's stdin when it is stdin-once: the
// first attach session that used stdin is the only one.
func (m *monitor) endStdinSession() {
	if !m.cfg.StdinOnce {
		return
	}
	if len(m.stdinPending) > 0 { // what the session sent still goes in first
		m.stdinCloseAfterFlush = true
		return
	}
	m.closeStdin()
}

// closeStdin gives the container end of file on stdin. A pty master is the
// output too and stays open; the container gets the terminal's EOF
// character instead, which ends a read the way a closed pipe would.
func (m *monitor) closeStdin() {
	if m.stdin < 0 {
		return
	}
	pending := len(m.stdinPending) > 0
	m.stdinPending = nil
	if m.stdin == m.stdout.fd {
		unix.Write(m.stdin, []byte{4}) // ^D, VEOF
		m.stdin = -1
		if pending {
			m.epoll(unix.EPOLL_CTL_MOD, m.stdout.fd, unix.EPOLLIN)
		}
	} else {
		if m.stdinWatched {
			unix.EpollCtl(m.epfd, unix.EPOLL_CTL_DEL, m.stdin, nil)
			m.stdinWatched = false
		}
		unix.Close(m.stdin)
		m.stdin = -1
	}
	if pending {
		for _, c := range m.clients {
			m.updateClient(c)
		}
	}
}

// resize sets the pty's window size; the kernel signals the container's
// foreground process group with SIGWINCH.
func (m *monitor) resize(payload []byte) {
	rows, cols, ok := wire.ParseResize(payload)
	if !ok || !m.cfg.Terminal || m.stdout.fd < 0 {
		return
	}
	unix.IoctlSetWinsize(m.stdout.fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
}
