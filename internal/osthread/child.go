package osthread

import (
	"os/exec"
	"runtime"
)

// StartChild starts cmd from an OS thread that lives until cmd exits, and
// waits for it there; the channel closes once it has exited and been
// reaped. The kernel sends a child its Pdeathsig when the thread that
// forked it ends, not the process, and the Go runtime ends a thread
// whenever a goroutine exits locked to it (Throwaway does, by design): a
// child started from an ordinary goroutine could be killed at any moment
// by unrelated work that happened to reuse the thread.
func StartChild(cmd *exec.Cmd) (exited <-chan struct{}, err error) {
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		// Unlocked once the child is reaped: the thread's own state was
		// never changed, so it may serve any goroutine again.
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return done, nil
}
