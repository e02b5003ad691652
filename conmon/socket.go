package conmon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon/wire"
	"github.com/minicri/minicri/internal/chans"
)

// socketPath is the path to connect to one of the monitor's sockets. A
// socket directory too long for sun_path is reached through /proc/self/fd:
// the monitor binds its sockets by relative names, so the directory's
// length is not its limit. done closes that directory once connected.
func socketPath(socketDir, name string) (path string, done func(), err error) {
	path = socketDir + "/" + name
	if len(path) <= wire.MaxSocketPath {
		return path, func() {}, nil
	}
	dir, err := unix.Open(socketDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, notRunning(err)
	}
	return "/proc/self/fd/" + strconv.Itoa(dir) + "/" + name, func() { unix.Close(dir) }, nil
}

// dial connects to one of the monitor's sockets (socketPath).
func dial(ctx context.Context, socketDir, name string) (*net.UnixConn, error) {
	path, done, err := socketPath(socketDir, name)
	if err != nil {
		return nil, err
	}
	defer done()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		return nil, notRunning(err)
	}
	return conn.(*net.UnixConn), nil
}

// notRunning marks the errors that mean nobody listens any more.
func notRunning(err error) error {
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%w: %w", ErrNotRunning, err)
	}
	return err
}

// ReopenLog asks the monitor to start a new log file at its log path, as the
// kubelet does after renaming the old one for rotation. It returns once the
// new file is open: lines after that go there, lines before it went to the
// renamed file, none is lost.
func ReopenLog(ctx context.Context, socketDir string) error {
	conn, err := dial(ctx, socketDir, wire.ControlSocket)
	if err != nil {
		return fmt.Errorf("reopen log: %w", err)
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write([]byte(wire.RequestReopenLog)); err != nil {
		return fmt.Errorf("reopen log: %w", contextError(ctx, err))
	}
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err == io.EOF {
		return fmt.Errorf("reopen log: %w: monitor hung up", ErrNotRunning)
	}
	if err != nil {
		return fmt.Errorf("reopen log: %w", contextError(ctx, err))
	}
	if err := wire.ParseReply(string(buf[:n])); err != nil {
		return fmt.Errorf("reopen log: %w", err)
	}
	return nil
}

// contextError prefers the context's reason to the deadline it caused.
func contextError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Attach connects to the container's live streams until its output ends
// (the container exited: nil) or ctx is done (ctx.Err()). Output written
// before Attach is not replayed; the log has it. stdout gets all output of
// a tty container. stdin, when not nil, goes to the container if it was
// created with Stdin; its end of file ends a StdinOnce container's stdin.
// resize, when not nil, sets a tty container's window size. A stdin reader
// that blocks may outlive Attach by one read: an io.Reader cannot be
// interrupted.
func Attach(ctx context.Context, socketDir string, stdin io.Reader, stdout, stderr io.Writer, resize <-chan Size) error {
	conn, err := dial(ctx, socketDir, wire.AttachSocket)
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	done := make(chan struct{})
	defer close(done)
	var send sync.Mutex // one frame at a time from the two senders below
	if stdin != nil {
		// An empty stdin frame opens the session as one with stdin, so its
		// end closes a stdin-once container's stdin even if nothing was sent.
		if _, err := conn.Write([]byte{wire.FrameStdin}); err != nil {
			return fmt.Errorf("attach: %w", contextError(ctx, err))
		}
		go sendStdin(conn, &send, stdin)
	}
	if resize != nil {
		go sendResizes(conn, &send, resize, done)
	}
	if err := receiveOutput(conn, stdout, stderr); err != nil {
		return fmt.Errorf("attach: %w", contextError(ctx, err))
	}
	return ctx.Err()
}

func sendStdin(conn *net.UnixConn, send *sync.Mutex, stdin io.Reader) {
	buf := make([]byte, 1+wire.MaxPayload)
	buf[0] = wire.FrameStdin
	for {
		n, err := stdin.Read(buf[1:])
		if n > 0 {
			send.Lock()
			_, werr := conn.Write(buf[:1+n])
			send.Unlock()
			if werr != nil {
				return
			}
		}
		if err != nil {
			send.Lock()
			conn.Write([]byte{wire.FrameStdinClose})
			send.Unlock()
			return
		}
	}
}

func sendResizes(conn *net.UnixConn, send *sync.Mutex, resize <-chan Size, done <-chan struct{}) {
	chans.Each(resize, done, func(s Size) bool {
		p := wire.ResizePayload(s.Rows, s.Cols)
		send.Lock()
		_, err := conn.Write(append([]byte{wire.FrameResize}, p[:]...))
		send.Unlock()
		return err == nil
	})
}

// receiveOutput copies output frames until the monitor closes the
// connection, which it does once the container's output ended.
func receiveOutput(conn *net.UnixConn, stdout, stderr io.Writer) error {
	buf := make([]byte, 1+wire.MaxPayload)
	for {
		n, err := conn.Read(buf)
		if err == io.EOF || n == 0 && err == nil {
			return nil
		}
		if err != nil {
			return err
		}
		w := stdout
		if buf[0] == wire.FrameStderr {
			w = stderr
		}
		if w == nil || n == 1 {
			continue
		}
		if _, err := w.Write(buf[1:n]); err != nil {
			return err
		}
	}
}
