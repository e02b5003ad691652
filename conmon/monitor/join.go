package monitor

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon/wire"
)

// JoinCommand is the hidden first argument of a join helper.
const JoinCommand = "join"

// collectEvery is how many joins a shared monitor takes between two
// garbage collections. Serving allocates nothing, but each join leaves a
// few KiB (the request, the helper's command line, the handover); with
// the collector off, a monitor that lives for months would keep them all.
const collectEvery = 64

// orphanGrace is how long after a helper's end the monitor looks for
// orphans it left, every orphanPoll.
const (
	orphanGrace = 2 * time.Second
	orphanPoll  = 100 * time.Millisecond
)

// helper is a join helper under way: a child of the monitor that creates
// one container and hands it over on handoverFD, then exits.
type helper struct {
	pid        int
	pidFD      int // readable once the helper exited
	handoverFD int // the monitor's end of the handover socket; -1 once read
}

// listenJoin binds the join socket. The directory may be too long for
// sun_path, so the socket is bound by its relative name from within it.
func (p *pool) listenJoin(dir string) {
	if unix.Chdir(dir) != nil {
		return
	}
	fd, err := listenPacket(wire.JoinSocket)
	unix.Chdir("/")
	if err != nil {
		return
	}
	p.joinDir, p.joinFD = dir, fd
	if p.tags.ctl(p.epfd, unix.EPOLL_CTL_ADD, fd, unix.EPOLLIN) != nil {
		p.closeJoin()
	}
}

// closeJoin stops taking containers and removes the join socket and its
// directory, which belong to this monitor alone.
func (p *pool) closeJoin() {
	if p.joinFD < 0 {
		return
	}
	unix.Close(p.joinFD)
	p.joinFD = -1
	unix.Unlink(p.joinDir + "/" + wire.JoinSocket)
	unix.Rmdir(p.joinDir)
}

// acceptJoin takes one join request and starts a helper for it. The helper
// gets the daemon's connection as its sync descriptor and answers on it
// itself, first with its pid; the monitor answers only when it could not
// start one.
func (p *pool) acceptJoin() {
	conn, _, err := unix.Accept4(p.joinFD, unix.SOCK_CLOEXEC)
	if err != nil {
		return
	}
	defer unix.Close(conn)
	// Only the daemon, which runs as the monitor's user, may have
	// containers created.
	cred, err := unix.GetsockoptUcred(conn, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil || cred.Uid != uint32(unix.Geteuid()) {
		return
	}
	tv := unix.Timeval{Sec: 1}
	unix.SetsockoptTimeval(conn, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	n, err := readRequest(conn, p.buf)
	if n <= 0 || err != nil {
		return
	}
	if n == len(p.buf) { // SOCK_SEQPACKET cut the rest off
		Report(conn, wire.FailedMessage("minicri-conmon join: request too long"))
		return
	}
	args := strings.Split(string(p.buf[:n]), "\x00")
	if _, err := wire.ParseArgs(args); err != nil {
		Report(conn, wire.FailedMessage("minicri-conmon join: "+err.Error()))
		return
	}
	h, err := p.startHelper(conn, args)
	if err != nil {
		Report(conn, wire.FailedMessage("minicri-conmon join: "+err.Error()))
		return
	}
	p.helpers = append(p.helpers, h)
	if p.joins++; p.joins%collectEvery == 0 {
		runtime.GC()
	}
}

// startHelper runs "minicri-conmon join ARGS" with the daemon's connection
// as fd 3 and a handover socket as fd 4, in a process group of its own: the
// daemon's deadline kills that group, which holds the runtime's create
// too, and not the monitor.
func (p *pool) startHelper(conn int, args []string) (*helper, error) {
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, errors.New("socketpair: " + err.Error())
	}
	pid, err := syscall.ForkExec("/proc/self/exe", append([]string{"minicri-conmon", JoinCommand}, args...), &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2, uintptr(conn), uintptr(sp[1])},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	unix.Close(sp[1]) // the helper has its copy
	if err != nil {
		unix.Close(sp[0])
		return nil, errors.New("start join helper: " + err.Error())
	}
	h := &helper{pid: pid, handoverFD: sp[0], pidFD: -1}
	if h.pidFD, err = unix.PidfdOpen(pid, 0); err != nil {
		unix.Kill(-pid, unix.SIGKILL)
		unix.Close(sp[0])
		return nil, errors.New("pidfd of the join helper: " + err.Error())
	}
	unix.SetNonblock(h.handoverFD, true)
	for _, fd := range []int{h.pidFD, h.handoverFD} {
		p.tags.ctl(p.epfd, unix.EPOLL_CTL_ADD, fd, unix.EPOLLIN)
	}
	return h, nil
}

// serveHelper takes a helper's handover, and reaps the helper once it
// exited. The two may come in one wake-up in either order: the handover is
// read before the helper is let go.
func (p *pool) serveHelper(h *helper, fd int) {
	if h.handoverFD >= 0 {
		p.takeHandover(h)
	}
	if fd != h.pidFD {
		return
	}
	wait4(h.pid, unix.WNOHANG)
	unix.Close(h.pidFD)
	if h.handoverFD >= 0 {
		unix.Close(h.handoverFD)
	}
	for i, other := range p.helpers {
		if other == h {
			p.helpers = append(p.helpers[:i], p.helpers[i+1:]...)
			break
		}
	}
	// A helper killed by the daemon's deadline leaves its runtime's
	// create to the monitor, the subreaper above it, which may die a
	// moment after the helper: look for it again for a little while.
	p.reapOrphans()
	p.reapUntil = time.Now().Add(orphanGrace).UnixNano()
}

// takeHandover receives a created container from its helper: the
// arguments handoverArgs wrote, with the helper's descriptors attached in
// the order of their first appearance. End of file means the helper failed
// and has told the daemon itself.
func (p *pool) takeHandover(h *helper) {
	oob := make([]byte, unix.CmsgSpace(8*4))
	n, oobn, _, _, err := unix.Recvmsg(h.handoverFD, p.buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err == unix.EAGAIN || err == unix.EINTR {
		return
	}
	unix.Close(h.handoverFD)
	h.handoverFD = -1
	if err != nil || n <= 0 || n == len(p.buf) {
		return // a helper that failed, or a cut message: the daemon's deadline cleans up
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, msg := range msgs {
			if rights, err := unix.ParseUnixRights(&msg); err == nil {
				fds = append(fds, rights...)
			}
		}
	}
	m, err := parseHandover(strings.Split(string(p.buf[:n]), "\x00"))
	if err == nil {
		err = renumber(m.handedFDs(), fds)
	}
	if err != nil {
		// Without its sync descriptor nobody can be told: the daemon's
		// deadline cleans up, as for a helper that died.
		for _, fd := range fds {
			unix.Close(fd)
		}
		return
	}
	if err := p.add(m); err != nil {
		m.abandon()
		Report(m.syncFD, wire.FailedMessage(err.Error()))
		m.finish()
		unix.Close(m.syncFD)
		return
	}
}

// renumber replaces the helper's descriptor numbers by the received ones:
// the helper sent each distinct descriptor once, in the order of fds.
func renumber(fds []*int, received []int) error {
	mapped := map[int]int{}
	for _, fd := range fds {
		if *fd < 0 {
			continue
		}
		if r, ok := mapped[*fd]; ok {
			*fd = r
			continue
		}
		if len(mapped) == len(received) {
			return errors.New("handover: " + strconv.Itoa(len(received)) + " descriptors, want more")
		}
		mapped[*fd] = received[len(mapped)]
		*fd = mapped[*fd]
	}
	return nil
}

// Join is the body of a join helper: it tells the daemon its pid, creates
// the container as a monitor's first image would, without becoming a
// subreaper, and hands it over to the shared monitor, its parent, which
// reports it created. It returns the helper's exit code.
func Join(args []string) int {
	unix.CloseRange(wire.HandoverFD+1, ^uint(0), 0)
	unix.CloseOnExec(wire.SyncFD)
	unix.CloseOnExec(wire.HandoverFD)
	Report(wire.SyncFD, wire.HelperMessage(unix.Getpid()))
	cfg, err := wire.ParseArgs(args)
	if err != nil {
		Report(wire.SyncFD, wire.FailedMessage("minicri-conmon join: "+err.Error()))
		return 2
	}
	m, err := create(cfg, false, func() error { return awaitGo(wire.SyncFD) })
	if err != nil {
		Report(wire.SyncFD, wire.FailedMessage(err.Error()))
		return 1
	}
	m.syncFD = wire.SyncFD
	if err := m.sendHandover(wire.HandoverFD); err != nil {
		m.abandon()
		Report(wire.SyncFD, wire.FailedMessage("hand the container over: "+err.Error()))
		return 1
	}
	return 0
}

// awaitGo waits on the daemon's connection for wire.GoMessage, which
// says the bundle is complete.
func awaitGo(conn int) error {
	tv := unix.NsecToTimeval(wire.GoTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(conn, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return errors.New("wait for the bundle: " + err.Error())
	}
	var b [16]byte
	n, err := readRequest(conn, b[:])
	if err != nil || string(b[:max(n, 0)]) != wire.GoMessage {
		return errors.New("the daemon gave the container up before its create")
	}
	return nil
}

// sendHandover sends the monitor's state to the shared monitor: the
// arguments of handoverArgs, NUL-separated, and each distinct descriptor
// once, in order.
func (m *monitor) sendHandover(fd int) error {
	args := append(m.handoverArgs(), "--")
	args = append(args, m.cfg.Args()...)
	var fds []int
	seen := map[int]bool{}
	for _, p := range m.handedFDs() {
		if *p >= 0 && !seen[*p] {
			seen[*p] = true
			fds = append(fds, *p)
		}
	}
	return unix.Sendmsg(fd, []byte(strings.Join(args, "\x00")), unix.UnixRights(fds...), nil, 0)
}
