package monitor

import "golang.org/x/sys/unix"

// wait4 is wait4(2) for pid (-1: any child), restarted when a signal
// interrupts it. A monitor gets SIGCHLD often; an interrupted wait is not
// an answer.
func wait4(pid, options int) (int, unix.WaitStatus, error) {
	var status unix.WaitStatus
	for {
		got, err := unix.Wait4(pid, &status, options, nil)
		if err != unix.EINTR {
			return got, status, err
		}
	}
}

// reapChildren reaps every child that has ended, without waiting for the
// others, and hands each to ended.
func reapChildren(ended func(pid int, status unix.WaitStatus)) {
	for {
		pid, status, err := wait4(-1, unix.WNOHANG)
		if pid <= 0 || err != nil {
			return
		}
		ended(pid, status)
	}
}

// reapAll reaps every child that has ended.
func reapAll() { reapChildren(func(int, unix.WaitStatus) {}) }
