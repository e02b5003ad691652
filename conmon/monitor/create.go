package monitor

import (
	"errors"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon/wire"
)

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
// made is gone again, the runtime's state included. A monitor's first image
// becomes the child subreaper, so that the container's init is its child
// once the runtime exits; a join helper must not, so that the init goes to
// the shared monitor above it instead. bundleReady, when not nil, waits
// until the bundle may be read, after the preparations and before the
// runtime's create.
func create(cfg wire.Config, subreaper bool, bundleReady func() error) (m *monitor, err error) {
	var u undo
	defer func() {
		if err != nil {
			u.run()
		}
	}()
	m = newMonitor(cfg)
	if subreaper {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return nil, errors.New("become child subreaper: " + err.Error())
		}
	}
	if err := m.prepareDirs(&u); err != nil {
		return nil, err
	}
	if err := writeCreator(); err != nil {
		return nil, err
	}
	defer unix.Unlink(wire.CreatorFile) // the create is over, whichever way
	if err := m.listen(&u); err != nil {
		return nil, err
	}
	io, err := m.prepareStdio(&u)
	if err != nil {
		return nil, err
	}
	if bundleReady != nil {
		if err := bundleReady(); err != nil {
			return nil, err
		}
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

// writeCreator names this process, in the socket directory (the working
// directory), as the one running the create (wire.CreatorFile). Written
// whole or not at all: a daemon may read it at any moment.
func writeCreator() error {
	if err := replaceFile(wire.CreatorFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600, false); err != nil {
		return errors.New("creator file: " + err.Error())
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
