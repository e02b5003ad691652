// Package osthread runs code that changes its OS thread's namespaces on a
// thread of its own that is thrown away afterwards.
package osthread

import (
	"fmt"
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

// PrivateMountNS runs fn on a throwaway thread (Throwaway) in a mount
// namespace of its own, every mount in it private, so nothing fn mounts
// reaches the host and all of it goes with the thread. hostNS is an fd of
// the caller's mount namespace, for fn to return to (setns) before it
// attaches a mount to the host. The thread has its own working directory
// too (a new mount namespace implies CLONE_FS), so fn may chdir.
func PrivateMountNS(fn func(hostNS int) error) error {
	return Throwaway(func() error {
		hostNS, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open the host's mount namespace: %w", err)
		}
		defer unix.Close(hostNS)
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("private mount namespace: %w", err)
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("private mount namespace: make mounts private: %w", err)
		}
		return fn(hostNS)
	})
}
