package conmon

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon/wire"
)

// WatchContainer calls done, in a goroutine of its own, once the monitor
// is done with the container: its exit file is written and its sockets
// are gone, or the monitor died. It holds one connection to the monitor's
// control socket, which the monitor closes then; done is called at once
// for a container already done.
//
// Every watch of the process waits in one goroutine (watcher): a goroutine
// blocked on each container's connection, and one more waiting for its
// end, were two stacks per container, a MiB of the daemon's memory at 100
// pods.
func WatchContainer(socketDir string, done func()) error {
	fd, err := connectWait(socketDir, time.Now().Add(watchConnectWait))
	switch {
	case err == nil:
		return watchFD(fd, done)
	case errors.Is(err, ErrNotRunning):
		go done()
		return nil
	default:
		return fmt.Errorf("watch container: %w", err)
	}
}

// watchConnectWait bounds the wait for room in a monitor's backlog.
const watchConnectWait = 10 * time.Second

// connectWait is the watch's connection made and asked for in three
// syscalls: a non-blocking socket of the watcher's own, a connect that
// completes at once when the monitor's backlog has room, and the request.
// A restart watches every container of the node this way; through the
// runtime's dialer each also cost a timer, a poller registration and a
// duplicate descriptor. While the backlog is full (a monitor that stopped
// accepting for a moment), the connect is tried again until deadline: the
// runtime's dialer failed at once, and a failed watch counts as a monitor
// gone.
func connectWait(socketDir string, deadline time.Time) (int, error) {
	path, closeDir, err := socketPath(socketDir, wire.ControlSocket)
	if err != nil {
		return -1, err
	}
	defer closeDir()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	addr := &unix.SockaddrUnix{Name: path}
	for {
		err = unix.Connect(fd, addr)
		if err == unix.EAGAIN && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if err != unix.EINTR {
			break
		}
	}
	switch err {
	case nil, unix.EISCONN:
		err = unix.Sendmsg(fd, []byte(wire.RequestWait), nil, nil, unix.MSG_NOSIGNAL)
		if err == unix.EPIPE || err == unix.ECONNRESET {
			err = fmt.Errorf("%w: %w", ErrNotRunning, err) // closed meanwhile: done
		}
	case unix.EAGAIN:
		err = fmt.Errorf("the monitor's backlog stayed full for %s", watchConnectWait)
	default:
		err = notRunning(err)
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// watchFD hands a watch connection to the watcher.
func watchFD(fd int, done func()) error {
	w, err := theWatcher()
	if err == nil {
		err = w.add(fd, done)
	}
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("watch container: %w", err)
	}
	return nil
}

// watcher waits for the ends of the watch connections: an epoll instance
// of their descriptors, itself waited for by the runtime's poller, so that
// one goroutine, parked and holding no thread, serves them all.
type watcher struct {
	ep      *os.File
	mu      sync.Mutex
	watches map[int32]func() // done of each connection, by descriptor
}

var theWatcher = sync.OnceValues(func() (*watcher, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	// Non-blocking, os.NewFile hands it to the runtime's poller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("epoll: %w", err)
	}
	w := &watcher{ep: os.NewFile(uintptr(epfd), "container-watches"), watches: map[int32]func(){}}
	go w.run()
	return w, nil
})

func (w *watcher) add(fd int, done func()) error {
	w.mu.Lock()
	w.watches[int32(fd)] = done
	w.mu.Unlock()
	// Level-triggered: an end that came before the add is seen at once.
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)}
	raw, err := w.ep.SyscallConn()
	if err == nil {
		cerr := raw.Control(func(ep uintptr) { err = unix.EpollCtl(int(ep), unix.EPOLL_CTL_ADD, fd, &ev) })
		if cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		w.mu.Lock()
		delete(w.watches, int32(fd))
		w.mu.Unlock()
		return fmt.Errorf("epoll add: %w", err)
	}
	return nil
}

func (w *watcher) run() {
	raw, err := w.ep.SyscallConn()
	if err != nil {
		panic(err) // an *os.File always has one
	}
	events := make([]unix.EpollEvent, 64)
	for {
		var n int
		err := raw.Read(func(ep uintptr) bool {
			var werr error
			n, werr = unix.EpollWait(int(ep), events, 0)
			return n > 0 || (werr != nil && werr != unix.EINTR)
		})
		if err != nil {
			panic(fmt.Errorf("container watches: %w", err)) // never closed
		}
		for _, ev := range events[:max(n, 0)] {
			if w.ended(int(ev.Fd)) {
				w.finish(int(ev.Fd))
			}
		}
	}
}

// ended reads what is there (the monitor sends nothing on a watch) and
// reports whether the connection is over.
func (w *watcher) ended(fd int) bool {
	var b [64]byte
	for {
		n, err := unix.Read(fd, b[:])
		switch {
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			return false
		case err != nil || n == 0:
			return true
		}
	}
}

func (w *watcher) finish(fd int) {
	raw, err := w.ep.SyscallConn()
	if err == nil {
		raw.Control(func(ep uintptr) { unix.EpollCtl(int(ep), unix.EPOLL_CTL_DEL, fd, nil) })
	}
	w.mu.Lock()
	done := w.watches[int32(fd)]
	delete(w.watches, int32(fd))
	w.mu.Unlock()
	unix.Close(fd)
	if done != nil {
		go done()
	}
}
