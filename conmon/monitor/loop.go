package monitor

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon/wire"
)

// watch sets up the epoll set the loop waits on. Output, stdin and client
// fds are non-blocking: one slow party must never stall the others.
func (m *monitor) watch() error {
	var err error
	// The init is the monitor's child since the runtime's create exited, so
	// the pidfd cannot name a reused pid.
	if m.pidFD, err = unix.PidfdOpen(m.containerPID, 0); err != nil {
		return errors.New("pidfd of the container: " + err.Error())
	}
	if m.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return errors.New("epoll: " + err.Error())
	}
	m.buf = make([]byte, 1+wire.MaxPayload)
	for _, fd := range []int{m.stdout.fd, m.stderr.fd, m.stdin} {
		if fd >= 0 {
			unix.SetNonblock(fd, true)
		}
	}
	for _, fd := range []int{m.pidFD, m.attachFD, m.controlFD, m.stdout.fd, m.stderr.fd} {
		if fd < 0 {
			continue
		}
		if err := m.epoll(unix.EPOLL_CTL_ADD, fd, unix.EPOLLIN); err != nil {
			return err
		}
	}
	return nil
}

func (m *monitor) epoll(op, fd int, events uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(fd)}
	if err := unix.EpollCtl(m.epfd, op, fd, &ev); err != nil {
		return errors.New("epoll_ctl: " + err.Error())
	}
	return nil
}

// orphanReapInterval is how often a monitor whose container shares its PID
// namespace reaps the orphans that container leaves: no fd tells of them.
const orphanReapInterval = 10 * time.Second

// serve runs until the container's init was reaped and its output drained.
func (m *monitor) serve() {
	for !m.done() {
		n, err := unix.EpollWait(m.epfd, m.events[:], m.waitMillis())
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		if n == 0 && m.exit == nil {
			m.reap()
		}
		for _, ev := range m.events[:n] {
			m.handle(int(ev.Fd), ev.Events)
		}
	}
}

// done is true once the container's output is drained and every attached
// client has been sent what was queued for it (closing a client's socket
// with frames still queued would cut the tail of its output), or at the
// drain deadline, whichever comes first.
func (m *monitor) done() bool {
	if m.exit == nil {
		return false
	}
	if time.Now().UnixNano() >= m.drainUntil {
		return true
	}
	return m.stdout.fd < 0 && m.stderr.fd < 0 && !m.clientsBehind()
}

func (m *monitor) clientsBehind() bool {
	for _, c := range m.clients {
		if c.pendingBytes > 0 {
			return true
		}
	}
	return false
}

func (m *monitor) waitMillis() int {
	if m.exit == nil {
		if m.sharedPIDNS {
			return int(orphanReapInterval / time.Millisecond)
		}
		return -1
	}
	left := (m.drainUntil - time.Now().UnixNano()) / int64(time.Millisecond)
	return int(max(left, 0)) + 1
}

func (m *monitor) handle(fd int, events uint32) {
	switch {
	case fd == m.pidFD:
		m.reap()
	case fd == m.attachFD:
		m.acceptClient()
	case fd == m.controlFD:
		m.serveControl()
	case fd == m.stdout.fd || fd == m.stderr.fd:
		if events&unix.EPOLLOUT != 0 { // a pty master is stdin too
			m.flushStdin()
		}
		if events&^unix.EPOLLOUT != 0 {
			m.readOutput(fd)
		}
	case fd == m.stdin:
		m.flushStdin()
	default:
		if c := m.client(fd); c != nil {
			m.serveClient(c, events)
		}
	}
}

// readOutput reads once from a stream and passes the bytes to the log and
// to every attached client. Reading once per wake-up keeps stdout and stderr
// fair; level-triggered epoll comes back for the rest.
func (m *monitor) readOutput(fd int) {
	o := &m.stdout
	if fd == m.stderr.fd {
		o = &m.stderr
	}
	n, err := unix.Read(fd, m.buf[1:])
	if n > 0 {
		m.log.write(o.stream, m.buf[1:1+n], time.Now())
		m.buf[0] = o.frame
		m.broadcast(m.buf[:1+n])
		return
	}
	if err == unix.EAGAIN || err == unix.EINTR {
		return
	}
	// End of file, or EIO from a pty master nobody holds the other side of.
	m.closeOutput(o)
}

func (m *monitor) closeOutput(o *output) {
	unix.EpollCtl(m.epfd, unix.EPOLL_CTL_DEL, o.fd, nil)
	if o.fd == m.stdin {
		m.stdin, m.stdinPending = -1, nil
	}
	unix.Close(o.fd)
	o.fd = -1
}

// reap collects every child that ended. The container's init is one of
// them; the rest are orphans that a container sharing the host's PID
// namespace left to the monitor, the child subreaper.
func (m *monitor) reap() {
	for {
		var status unix.WaitStatus
		pid, err := unix.Wait4(-1, &status, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		if pid == m.containerPID && m.exit == nil {
			m.containerExited(status)
		}
	}
}

func (m *monitor) containerExited(status unix.WaitStatus) {
	unix.EpollCtl(m.epfd, unix.EPOLL_CTL_DEL, m.pidFD, nil)
	unix.Close(m.pidFD)
	m.pidFD = -1
	now := time.Now()
	e := &wire.ExitStatus{Code: status.ExitStatus(), At: now}
	if status.Signaled() {
		e.Code = 128 + int(status.Signal())
	}
	if m.oom.killed() {
		e.Reason = "OOMKilled"
	}
	m.exit = e
	m.drainUntil = now.Add(drainTimeout).UnixNano()
}

// finish writes the exit file, then lets the clients go: a client that sees
// its connection end finds the exit file in place.
func (m *monitor) finish() {
	if m.exit != nil {
		writeExitFile(m.cfg.ExitFile, m.exit.Marshal())
	}
	m.log.close()
	unix.Unlink(wire.AttachSocket)
	unix.Unlink(wire.ControlSocket)
	for _, c := range m.clients {
		unix.Close(c.fd)
	}
	m.clients = nil
}

// writeExitFile replaces the exit file atomically: a reader sees all of it
// or nothing, even when the daemon reads it while the monitor writes.
func writeExitFile(path string, content []byte) error {
	tmp := path + ".tmp"
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	err = writeAll(fd, content)
	if err == nil {
		err = unix.Fsync(fd)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Rename(tmp, path)
	}
	if err != nil {
		unix.Unlink(tmp)
	}
	return err
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// readFile reads a small file with plain system calls: os.Open would start
// the runtime's network poller, and with it a thread, for nothing.
func readFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var b []byte
	var buf [1024]byte
	for {
		n, err := unix.Read(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return b, nil
		}
		b = append(b, buf[:n]...)
	}
}

// serveControl answers one request on a new control connection. The daemon
// sends its request right after connecting; the timeouts keep a client that
// does not from stalling the loop.
func (m *monitor) serveControl() {
	conn, _, err := unix.Accept4(m.controlFD, unix.SOCK_CLOEXEC)
	if err != nil {
		return
	}
	defer unix.Close(conn)
	tv := unix.Timeval{Sec: 1}
	unix.SetsockoptTimeval(conn, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	unix.SetsockoptTimeval(conn, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	n, err := unix.Read(conn, m.buf)
	if n <= 0 || err != nil {
		return
	}
	reply := wire.ReplyOK
	switch string(m.buf[:n]) {
	case wire.RequestReopenLog:
		if err := m.log.reopen(); err != nil {
			reply = wire.ReplyError(err)
		}
	default:
		reply = wire.ReplyError(errors.New("unknown request"))
	}
	unix.Write(conn, []byte(reply))
}
