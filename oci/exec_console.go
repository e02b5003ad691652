package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// maxSocketPath is what sun_path holds, less its terminating NUL.
const maxSocketPath = 107

// consoleSocket is where the runtime sends the pty master of an exec with a
// terminal (`runc exec --console-socket`, runc's documented way of handing
// a terminal to its caller): a unix socket in the exec's state directory,
// which only root reaches. With the master in hand the daemon reads the
// container's own pty: no pty of ours between it and the client, and no
// runtime relaying every byte between the two.
type consoleSocket struct {
	ln   *os.File // listening, non-blocking: waits in the poller
	dial string   // the path the runtime connects to
	file string   // the socket's name in the state directory
	dir  *os.File // held while dial goes through /proc (a long state dir)
	once sync.Once
}

// listenConsole makes the console socket stateDir/name. A path longer than
// sun_path is reached through a descriptor of the state directory that the
// daemon holds, /proc/PID/fd/N/name, which the runtime (root) may follow.
func listenConsole(stateDir, name string) (_ *consoleSocket, retErr error) {
	c := &consoleSocket{file: filepath.Join(stateDir, name), dial: filepath.Join(stateDir, name)}
	bind := c.file
	if len(c.dial) > maxSocketPath {
		dir, err := os.OpenFile(stateDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("console socket: %w", err)
		}
		c.dir = dir
		bind = "/proc/self/fd/" + strconv.Itoa(int(dir.Fd())) + "/" + name
		c.dial = "/proc/" + strconv.Itoa(os.Getpid()) + "/fd/" + strconv.Itoa(int(dir.Fd())) + "/" + name
	}
	defer func() {
		if retErr != nil && c.dir != nil {
			c.dir.Close()
		}
	}()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: bind}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("console socket %s: bind: %w", c.file, err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		unix.Close(fd)
		os.Remove(c.file)
		return nil, fmt.Errorf("console socket %s: listen: %w", c.file, err)
	}
	c.ln = os.NewFile(uintptr(fd), c.file)
	return c, nil
}

// Close stops listening and removes the socket; it may be called again.
func (c *consoleSocket) Close() error {
	c.once.Do(func() {
		c.ln.Close()
		os.Remove(c.file)
		if c.dir != nil {
			c.dir.Close()
		}
	})
	return nil
}

// receive returns the pty master that the runtime sends, or an error once
// the runtime exited (exited closed) without sending one: a runtime that
// could not start the process says why in its log.
func (c *consoleSocket) receive(exited <-chan struct{}) (*os.File, error) {
	conn := -1
	err := untilReady(c.ln, exited, func(fd int) error {
		var err error
		conn, _, err = unix.Accept4(fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("console socket: the runtime did not connect: %w", err)
	}
	cf := os.NewFile(uintptr(conn), "console")
	defer cf.Close()
	master := -1
	err = untilReady(cf, exited, func(fd int) error {
		buf := make([]byte, 4096) // the runtime sends the pty's name along
		oob := make([]byte, unix.CmsgSpace(4))
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != nil {
			return err
		}
		if n == 0 && oobn == 0 {
			return errors.New("closed without a descriptor")
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			return errors.New("no descriptor in the message")
		}
		fds, err := unix.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 1 {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return errors.New("no descriptor in the message")
		}
		master = fds[0]
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	// Only a pty master answers TIOCGPTN: the descriptor is wired to the
	// client's streams as nothing else.
	if _, err := unix.IoctlGetInt(master, unix.TIOCGPTN); err != nil {
		unix.Close(master)
		return nil, fmt.Errorf("console socket: the descriptor sent is not a pty master: %w", err)
	}
	// Non-blocking, so that reads wait in the poller and not on a thread.
	if err := unix.SetNonblock(master, true); err != nil {
		unix.Close(master)
		return nil, fmt.Errorf("console socket: %w", err)
	}
	return os.NewFile(uintptr(master), "ptmx"), nil
}

// untilReady runs op, a non-blocking call that fails with EAGAIN while f
// has nothing for it, until it does not, waiting in the poller between
// tries. Once stop closes it tries a last time: what the runtime sent
// before it exited is there by then.
func untilReady(f *os.File, stop <-chan struct{}, op func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	waited := make(chan struct{})
	defer close(waited)
	go func() {
		select {
		case <-stop:
			_ = f.SetReadDeadline(time.Now())
		case <-waited:
		}
	}()
	var opErr error
	err = rc.Read(func(fd uintptr) bool {
		opErr = op(int(fd))
		return !errors.Is(opErr, unix.EAGAIN)
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if err := rc.Control(func(fd uintptr) { opErr = op(int(fd)) }); err != nil {
			return err
		}
		if errors.Is(opErr, unix.EAGAIN) {
			return errors.New("the runtime exited first")
		}
		return opErr
	}
	if err != nil {
		return err
	}
	return opErr
}
