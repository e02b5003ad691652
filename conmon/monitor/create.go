package monitor

import (
	"errors"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon/wire"
)

// monitor is the state of one container's monitor. Everything is touched by
// the one goroutine that runs the loop; nothing needs a lock.
type monitor struct {
	cfg     wire.Config
	syncFD  int // the pipe to the daemon until the monitor reported, else -1
	epfd    int
	buf     []byte // buf[0] is a frame type, buf[1:] one read of output or one client frame
	log     *logWriter
	logMade bool // the monitor created the log file: a failed start removes it

	stdout, stderr output // fd -1 once closed; with a tty only stdout, the pty master
	stdin          int    // stdin pipe or pty master, -1 when there is none (any more)
	stdinPending   []byte // written to stdin once it is writable again
	stdinWatched   bool   // stdin is registered for EPOLLOUT

	attachFD, controlFD int
	clients             []*client

	// The container's init is a child once the runtime's create exited; its
	// pidfd turns readable when it exits. The runtime's SIGCHLD handling
	// would cost a thread parked for signals, the pidfd costs nothing.
	pidFD int
	// sharedPIDNS: the container runs in the monitor's PID namespace, and
	// its orphans come to the monitor, which reaps them now and then.
	sharedPIDNS bool

	containerPID int
	oom          oomCounter
	exit         *wire.ExitStatus // set when the container's init has been reaped
	drainUntil   int64            // unix nanoseconds; reading stops then even without EOF
	events       [16]unix.EpollEvent
}

type output struct {
	fd     int
	stream string // "stdout" or "stderr", the CRI log's stream name
	frame  byte   // wire.FrameStdout or wire.FrameStderr
}

func newMonitor(cfg wire.Config) *monitor {
	return &monitor{
		cfg:    cfg,
		log:    newLogWriter(cfg.LogPath, cfg.LogMaxLine),
		stdout: output{fd: -1, stream: "stdout", frame: wire.FrameStdout},
		stderr: output{fd: -1, stream: "stderr", frame: wire.FrameStderr},
		stdin:  -1, attachFD: -1, controlFD: -1, pidFD: -1, epfd: -1, syncFD: -1,
	}
}

// undo collects the steps that take back a failed create, run in reverse.
// They remove what is on disk; descriptors need no undoing, the monitor
// exits right after a failed create.
type undo []func()

func (u *undo) add(f func()) { *u = append(*u, f) }

func (u undo) run() {
	for i := len(u) - 1; i >= 0; i-- {
		u[i]()
	}
}

// create prepares everything the container's stdio needs, runs the runtime's
// create, and returns the monitor ready to serve. On failure everything it
// made is gone again, the runtime's state included.
func create(cfg wire.Config) (m *monitor, err error) {
	var u undo
	defer func() {
		if err != nil {
			u.run()
		}
	}()
	m = newMonitor(cfg)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, errors.New("become child subreaper: " + err.Error())
	}
	if err := m.prepareDirs(&u); err != nil {
		return nil, err
	}
	if err := m.listen(&u); err != nil {
		return nil, err
	}
	io, err := m.prepareStdio(&u)
	if err != nil {
		return nil, err
	}
	if err := m.runCreate(io); err != nil {
		return nil, err
	}
	u.add(m.deleteContainer)
	// Only now: a monitor killed during the create leaves no log file. The
	// container does not run before the daemon starts it, so no line is lost.
	if err := m.openLog(&u); err != nil {
		return nil, err
	}
	if err := m.afterCreate(io); err != nil {
		return nil, err
	}
	return m, nil
}

// prepareDirs makes the socket directory the working directory, so that
// sockets are bound by short relative names, and clears a stale exit file.
func (m *monitor) prepareDirs(u *undo) error {
	if !exists(m.cfg.SocketDir) {
		if err := os.MkdirAll(m.cfg.SocketDir, 0o700); err != nil {
			return errors.New("socket dir: " + err.Error())
		}
		u.add(func() { os.Remove(m.cfg.SocketDir) })
	}
	if err := unix.Chdir(m.cfg.SocketDir); err != nil {
		return errors.New("socket dir: " + err.Error())
	}
	exitDir := m.cfg.ExitFile[:strings.LastIndexByte(m.cfg.ExitFile, '/')+1]
	if err := os.MkdirAll(exitDir, 0o700); err != nil {
		return errors.New("exit file dir: " + err.Error())
	}
	if err := os.Remove(m.cfg.ExitFile); err != nil && !os.IsNotExist(err) {
		return errors.New("stale exit file: " + err.Error())
	}
	for _, name := range []string{wire.PIDFile, wire.RuntimeLog} {
		u.add(func() { unix.Unlink(name) })
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// openLog opens the CRI log; a failed create removes it again if it made it.
func (m *monitor) openLog(u *undo) error {
	made := m.cfg.LogPath != "" && !exists(m.cfg.LogPath)
	if err := m.log.open(); err != nil {
		return err
	}
	m.logMade = made
	if made {
		u.add(func() { os.Remove(m.cfg.LogPath) })
	}
	return nil
}

// listen binds the attach and control sockets before the container exists,
// so that an attach can follow the start without a gap.
func (m *monitor) listen(u *undo) error {
	var err error
	if m.attachFD, err = listenPacket(wire.AttachSocket); err != nil {
		return err
	}
	u.add(func() { unix.Unlink(wire.AttachSocket) })
	if m.controlFD, err = listenPacket(wire.ControlSocket); err != nil {
		return err
	}
	u.add(func() { unix.Unlink(wire.ControlSocket) })
	return nil
}

func listenPacket(name string) (int, error) {
	return listenUnix(name, unix.SOCK_SEQPACKET, 16)
}

func listenUnix(name string, typ, backlog int) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, errors.New("socket " + name + ": " + err.Error())
	}
	unix.Unlink(name) // left by an earlier monitor of the same container
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: name}); err != nil {
		unix.Close(fd)
		return -1, errors.New("bind " + name + ": " + err.Error())
	}
	if err := unix.Listen(fd, backlog); err != nil {
		unix.Close(fd)
		unix.Unlink(name)
		return -1, errors.New("listen " + name + ": " + err.Error())
	}
	return fd, nil
}
