package conmon

import (
	"context"
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := dial(ctx, socketDir, wire.ControlSocket)
	if errors.Is(err, ErrNotRunning) || errors.Is(err, os.ErrNotExist) {
		go done()
		return nil
	}
	if err != nil {
		return fmt.Errorf("watch container: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(wire.RequestWait)); err != nil {
		go done() // the monitor closed the socket meanwhile: done
		return nil
	}
	// The watcher's own descriptor of the connection: conn's is the
	// runtime's poller's, closed on return.
	raw, err := conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("watch container: %w", err)
	}
	fd := -1
	if cerr := raw.Control(func(c uintptr) { fd, err = unix.FcntlInt(c, unix.F_DUPFD_CLOEXEC, 0) }); cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("watch container: %w", err)
	}
	w, err := theWatcher()
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("watch container: %w", err)
	}
	if err := w.add(fd, done); err != nil {
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
