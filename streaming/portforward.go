package streaming

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// dialTimeout bounds the connect to a pod's port.
const dialTimeout = 10 * time.Second

// ForwardPort connects to port on localhost inside the network namespace at
// netns ("" is the host's, for a hostNetwork pod) and copies between that
// connection and stream: the client's end of input half-closes the
// connection, the pod's end of output ends the forward, and so does ctx.
func ForwardPort(ctx context.Context, netns string, port int32, stream io.ReadWriteCloser) error {
	conn, err := DialInNamespace(ctx, netns, port)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	go func() {
		// Client to pod. This copy may outlive the forward by one read of
		// the stream, which ends when the stream is closed after us.
		_, _ = io.Copy(conn, stream)
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
	}()
	_, err = io.Copy(stream, conn)
	if err != nil && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("copy from port %d: %w", port, err)
	}
	return nil
}

// DialInNamespace connects to port on localhost (IPv4, then IPv6) from
// inside the network namespace at netns. A socket belongs to the namespace
// of the thread that created it, so the dial runs on a thread that enters
// the namespace and goes back to the daemon's afterwards.
func DialInNamespace(ctx context.Context, netns string, port int32) (net.Conn, error) {
	if netns == "" {
		return dialLocalhost(ctx, port)
	}
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		conn, err := inNetworkNamespace(netns, func() (net.Conn, error) { return dialLocalhost(ctx, port) })
		ch <- result{conn, err}
	}()
	r := <-ch
	return r.conn, r.err
}

// inNetworkNamespace runs dial on a locked thread moved into netns. The
// thread goes back to its own namespace afterwards; if it cannot, it stays
// locked and the runtime ends it with the goroutine. The main thread is
// never used: the runtime would park it for good instead of ending it.
func inNetworkNamespace(netns string, dial func() (net.Conn, error)) (net.Conn, error) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		defer runtime.UnlockOSThread()
		type result struct {
			conn net.Conn
			err  error
		}
		ch := make(chan result, 1)
		go func() {
			conn, err := inNetworkNamespace(netns, dial)
			ch <- result{conn, err}
		}()
		r := <-ch
		return r.conn, r.err
	}
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("open own network namespace: %w", err)
	}
	defer own.Close()
	target, err := os.Open(netns)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("open pod network namespace: %w", err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("enter pod network namespace: %w", err)
	}
	conn, err := dial()
	if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
		runtime.UnlockOSThread()
	}
	return conn, err
}

// dialLocalhost tries 127.0.0.1 then ::1, one after the other on this
// goroutine: a parallel dial would create its sockets on other threads.
func dialLocalhost(ctx context.Context, port int32) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	p := strconv.Itoa(int(port))
	conn, err4 := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", p))
	if err4 == nil {
		return conn, nil
	}
	conn, err6 := d.DialContext(ctx, "tcp6", net.JoinHostPort("::1", p))
	if err6 == nil {
		return conn, nil
	}
	return nil, fmt.Errorf("connect to localhost:%d: %w", port, err4)
}
