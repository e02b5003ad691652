// Package osthread runs code that changes its OS thread's namespaces on a
// thread of its own that is thrown away afterwards.
package osthread

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// Throwaway runs fn on an OS thread that is never given back to the Go
// scheduler. fn changes the thread's namespaces; since the goroutine returns
// while still locked, the runtime ends the thread instead of letting another
// goroutine inherit a foreign network or UTS namespace.
//
// The main thread is the exception: the runtime cannot end it and parks it
// for good instead, which would keep fn's namespaces alive forever (and
// show them in /proc/self/ns). So when the goroutine lands there it holds the
// main thread and hands fn to a nested goroutine, which then cannot be
// scheduled on it.
//
// This is preferred over re-executing the daemon as a small helper: it costs
// a thread instead of a process (microseconds rather than milliseconds),
// needs no hidden subcommand in the binary, and has been safe since Go 1.10
// made locked-thread exit terminate the thread. fn may unshare a network,
// IPC, UTS or mount namespace; not a user one, which no thread of a
// multi-threaded process can enter.
func Throwaway(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			defer runtime.UnlockOSThread()
			errc <- Throwaway(fn)
			return
		}
		// No UnlockOSThread: see above.
		errc <- fn()
	}()
	return <-errc
}
