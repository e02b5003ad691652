package conmon

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon/wire"
)

// fakeControl listens where a monitor's control socket would be, with a
// backlog of one.
func fakeControl(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	// Bound through the directory's descriptor: a path too long for
	// sun_path is one of the cases.
	dirFD, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirFD)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: fmt.Sprintf("/proc/self/fd/%d/%s", dirFD, wire.ControlSocket)}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	return fd
}

// acceptWait accepts one watch and checks its request.
func acceptWait(t *testing.T, l int) int {
	t.Helper()
	c, _, err := unix.Accept4(l, unix.SOCK_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := unix.Read(c, buf)
	if err != nil || string(buf[:n]) != wire.RequestWait {
		t.Fatalf("the watch asked %q (%v), want %q", buf[:n], err, wire.RequestWait)
	}
	return c
}

func awaitDone(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the watch did not end", what)
	}
}

// A watch ends when its monitor closes the connection; a monitor that no
// longer listens is one that is done. Both on a socket path too long for
// sun_path, reached through the directory's descriptor.
func TestWatchConnectsAndEnds(t *testing.T) {
	for _, long := range []bool{false, true} {
		dir := t.TempDir()
		if long {
			dir = filepath.Join(dir, strings.Repeat("d", 100))
			if err := unix.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		l := fakeControl(t, dir)
		done := make(chan struct{})
		if err := WatchContainer(dir, func() { close(done) }); err != nil {
			t.Fatalf("long path %v: %v", long, err)
		}
		c := acceptWait(t, l)
		select {
		case <-done:
			t.Fatalf("long path %v: the watch ended with the monitor still holding it", long)
		case <-time.After(50 * time.Millisecond):
		}
		unix.Close(c)
		awaitDone(t, done, "closed by the monitor")

		gone := make(chan struct{})
		if err := WatchContainer(filepath.Join(dir, "none"), func() { close(gone) }); err != nil {
			t.Fatalf("long path %v: watch of a monitor that is gone: %v", long, err)
		}
		awaitDone(t, gone, "no monitor")
	}
}

// A monitor whose backlog is full makes the watch wait for room, and the
// watch still ends with the monitor's close.
func TestWatchWaitsForAFullBacklog(t *testing.T) {
	dir := t.TempDir()
	l := fakeControl(t, dir)
	var fillers []int
	for {
		fd, err := connectWait(dir, time.Now()) // no wait
		if err != nil && strings.Contains(err.Error(), "backlog stayed full") {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		fillers = append(fillers, fd)
		if len(fillers) > 16 {
			t.Fatal("a backlog of 1 took 16 connections")
		}
	}
	for _, fd := range fillers {
		defer unix.Close(fd)
	}
	done := make(chan struct{})
	watched := make(chan error, 1)
	go func() { watched <- WatchContainer(dir, func() { close(done) }) }()
	select {
	case err := <-watched:
		t.Fatalf("the watch returned (%v) with the backlog full", err)
	case <-time.After(100 * time.Millisecond):
	}
	var accepted []int
	for range fillers {
		accepted = append(accepted, acceptWait(t, l)) // room for the watch
	}
	if err := <-watched; err != nil {
		t.Fatal(err)
	}
	c := acceptWait(t, l)
	for _, a := range accepted {
		unix.Close(a)
	}
	unix.Close(c)
	awaitDone(t, done, "after the wait for room")
}
