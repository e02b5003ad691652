package monitor

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon/wire"
)

// watch adds the container's descriptors to the pool's epoll set. Output,
// stdin and client fds are non-blocking: one slow party must never stall
// the others.
func (m *monitor) watch() error {
	var err error
	// The init is the monitor's child since the runtime's create exited, so
	// the pidfd cannot name a reused pid.
	if m.pidFD, err = unix.PidfdOpen(m.containerPID, 0); err != nil {
		return errors.New("pidfd of the container: " + err.Error())
	}
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
	// EPOLLPRI alone: a cgroup file always polls readable.
	if m.oom.open(); m.oom.fd >= 0 && m.epoll(unix.EPOLL_CTL_ADD, m.oom.fd, unix.EPOLLPRI) != nil {
		m.oom.close() // the count is read at the exit alone, as on v1
	}
	return nil
}

// oomEvent: memory.events changed; read it while the cgroup is there.
func (m *monitor) oomEvent() {
	if !m.oom.refresh() {
		m.closeOOM()
	}
}

func (m *monitor) closeOOM() {
	if m.oom.fd >= 0 {
		unix.EpollCtl(m.epfd, unix.EPOLL_CTL_DEL, m.oom.fd, nil)
	}
	m.oom.close()
}

func (m *monitor) epoll(op, fd int, events uint32) error {
	return m.tags.ctl(m.epfd, op, fd, events)
}

// owns reports whether fd is one of the container's descriptors.
func (m *monitor) owns(fd int) bool {
	switch fd {
	case m.pidFD, m.attachFD, m.controlFD, m.stdout.fd, m.stderr.fd, m.stdin, m.oom.fd:
		return true
	}
	return m.client(fd) != nil || m.waiter(fd) >= 0
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

// waitMillis is how long the loop may wait for this container: forever
// while it runs, until the drain deadline once it exited.
func (m *monitor) waitMillis() int {
	if m.exit == nil {
		return -1
	}
	left := (m.drainUntil - time.Now().UnixNano()) / int64(time.Millisecond)
	return int(max(left, 0)) + 1
}

func (m *monitor) handle(fd int, events uint32) {
	switch {
	case fd == m.pidFD:
		m.reapInit()
	case fd == m.oom.fd:
		m.oomEvent()
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
	case m.waiter(fd) >= 0:
		m.dropWaiter(fd) // the daemon hung up: it went away
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

// reapInit reaps the container's init once its pidfd turned readable. Only
// its pid is waited for: other children of a shared monitor are other
// containers' inits, whose exits their own pidfds report.
func (m *monitor) reapInit() {
	if m.exit != nil {
		return
	}
	if pid, status, err := wait4(m.containerPID, unix.WNOHANG); pid == m.containerPID && err == nil {
		m.containerExited(status)
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
	m.closeOOM()
	m.exit = e
	m.drainUntil = now.Add(drainTimeout).UnixNano()
}

// finish writes the exit file, then lets the clients go: a client that sees
// its connection end finds the exit file in place. Everything the container
// held is closed; a shared monitor goes on serving the others.
func (m *monitor) finish() {
	if m.exit != nil {
		writeExitFile(m.cfg.ExitFile, m.exit.Marshal())
	}
	m.log.close()
	m.closeOOM()
	unix.Unlink(m.socketPath(wire.AttachSocket))
	unix.Unlink(m.socketPath(wire.ControlSocket))
	for _, fd := range []*int{&m.attachFD, &m.controlFD} {
		if *fd >= 0 {
			unix.EpollCtl(m.epfd, unix.EPOLL_CTL_DEL, *fd, nil)
			closeListener(*fd)
		}
		*fd = -1
	}
	for _, c := range m.clients {
		unix.EpollCtl(m.epfd, unix.EPOLL_CTL_DEL, c.fd, nil)
		closeConn(c.fd)
	}
	m.clients = nil
	if m.stdin == m.stdout.fd {
		m.stdin = -1 // a pty master is stdout and stdin: closed once
	}
	for _, fd := range []*int{&m.attachFD, &m.controlFD, &m.stdout.fd, &m.stderr.fd, &m.stdin, &m.pidFD} {
		if *fd >= 0 {
			unix.Close(*fd)
		}
		*fd = -1
	}
	// Last: a daemon that waits for the end reads the exit file next.
	for _, fd := range m.waiters {
		unix.Close(fd)
	}
	m.waiters = nil
}

// writeExitFile replaces the exit file atomically: a reader sees all of it
// or nothing, even when the daemon reads it while the monitor writes.
func writeExitFile(path string, content []byte) error {
	return replaceFile(path, content, 0o644, true)
}

// replaceFile writes path whole or not at all (a temp file renamed over
// it), durably when asked, with plain system calls: os.WriteFile would
// start the runtime's network poller, and with it a thread and two
// descriptors, for nothing.
func replaceFile(path string, content []byte, perm uint32, durable bool) error {
	tmp := path + ".tmp"
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, perm)
	if err != nil {
		return err
	}
	err = writeAll(fd, content)
	if err == nil && durable {
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
	defer func() {
		if conn >= 0 {
			unix.Close(conn)
		}
	}()
	tv := unix.Timeval{Sec: 1}
	unix.SetsockoptTimeval(conn, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	unix.SetsockoptTimeval(conn, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	n, err := readRequest(conn, m.buf)
	if n <= 0 || err != nil {
		return
	}
	reply := wire.ReplyOK
	switch string(m.buf[:n]) {
	case wire.RequestWait:
		// Kept open, and only watched for a hang-up: finish closes it.
		if m.epoll(unix.EPOLL_CTL_ADD, conn, 0) == nil {
			m.waiters = append(m.waiters, conn)
			conn = -1
		}
		return
	case wire.RequestReopenLog:
		if err := m.log.reopen(); err != nil {
			reply = wire.ReplyError(err)
		}
	default:
		reply = wire.ReplyError(errors.New("unknown request"))
	}
	writeAll(conn, []byte(reply))
}

// readRequest reads one request from a connection with a receive timeout.
// A signal interrupts such a read even under SA_RESTART (signal(7)), and a
// monitor gets SIGCHLD whenever a child of its ends: a join helper just
// after its handover, as the daemon sends its first request. Dropping the
// connection then would make the daemon take a live container for dead.
func readRequest(conn int, buf []byte) (int, error) {
	for {
		n, err := unix.Read(conn, buf)
		if err != unix.EINTR {
			return n, err
		}
	}
}

func (m *monitor) waiter(fd int) int {
	for i, w := range m.waiters {
		if w == fd {
			return i
		}
	}
	return -1
}

func (m *monitor) dropWaiter(fd int) {
	i := m.waiter(fd)
	unix.EpollCtl(m.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	unix.Close(fd)
	m.waiters = append(m.waiters[:i], m.waiters[i+1:]...)
}
