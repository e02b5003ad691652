package conmon

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/procstat"
)

// WatchMonitor returns a channel that is closed when the monitor exits,
// whether it finished its job or was killed. It waits on a pidfd through
// the runtime's poller: no thread and no polling per monitor. A monitor
// already gone, or a pid that now belongs to another process (its start
// time is not started), gives a channel closed at once.
func WatchMonitor(pid int, started uint64) (<-chan struct{}, error) {
	pidfd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return closedChannel(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("watch monitor %d: pidfd_open: %w", pid, err)
	}
	// Checked after pidfd_open: the fd now pins the process, so a match
	// cannot go stale.
	if st, err := startTime(pid); err != nil || st != started {
		unix.Close(pidfd)
		return closedChannel(), nil
	}
	return watchPidfd(pidfd, false), nil
}

// closedChannel is the answer of a watch whose process is gone already.
func closedChannel() <-chan struct{} {
	done := make(chan struct{})
	close(done)
	return done
}

// Alive reports whether the monitor that started at started (clock ticks
// since boot, Created.MonitorStartTime) still runs as pid.
func Alive(pid int, started uint64) bool {
	st, err := procstat.Read(pid)
	return err == nil && st.StartTime == started && st.Live()
}

// reapChild waits for the monitor, a child of the daemon, to exit, and reaps
// it, so that no zombie stays behind; the channel closes then. A daemon that
// restarted has no such child: its monitors went to the init process.
func reapChild(pid int) <-chan struct{} {
	pidfd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return closedChannel() // cannot happen for an unreaped child; nothing to wait on
	}
	return watchPidfd(pidfd, true)
}

// watchPidfd returns a channel closed when the process of pidfd exits,
// reaped first when reap is set (it must then be our child). It takes the fd.
func watchPidfd(pidfd int, reap bool) <-chan struct{} {
	done := make(chan struct{})
	f := os.NewFile(uintptr(pidfd), "pidfd")
	go func() {
		defer close(done)
		defer f.Close()
		waitExited(f)
		if reap {
			var info unix.Siginfo
			unix.Waitid(unix.P_PIDFD, pidfd, &info, unix.WEXITED|unix.WNOHANG, nil)
		}
	}()
	return done
}

// waitExited parks the goroutine until the pidfd turns readable, which it
// does when the process exits. The fd is non-blocking, so os registered it
// with the runtime's poller and RawConn.Read waits there.
func waitExited(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	rc.Read(func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		return n > 0 || (err != nil && err != unix.EINTR)
	})
}

// startTime reads when the process started, in clock ticks since boot.
func startTime(pid int) (uint64, error) {
	st, err := procstat.Read(pid)
	return st.StartTime, err
}
