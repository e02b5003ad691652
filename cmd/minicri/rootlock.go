package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/procstat"
)

// rootLockWait bounds how long a daemon waits for the state root's lock
// while the daemon that held it is gone or dying: the kernel drops a flock
// only when the last descriptor of its open file is closed, and a process
// the dead daemon forked may hold a copy for a moment (see lockFDFloor).
const rootLockWait = 30 * time.Second

// rootLockPoll is how often a waiting daemon tries the lock again.
const rootLockPoll = 100 * time.Millisecond

// lockFDFloor is the lowest descriptor number the lock may have: above
// every descriptor a child is handed (stdio, ExtraFiles from fd 3 on). A
// child between its fork and its exec holds a copy of the daemon's table,
// the listening sockets with it, and a dup2 onto a handed descriptor's
// number closes that copy; were the lock's number among them, such a child
// of a killed daemon would hold the sockets (debug.sock answering, the next
// daemon refused) with the lock already free. Above them, it holds the lock
// as long as the sockets, and the next daemon's wait for the lock covers
// both (docs/reliability.md).
const lockFDFloor = 64

// openAbove opens path (read-write, created 0600, close-on-exec) at a
// descriptor number of floor or more.
func openAbove(path string, floor int) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, floor)
	unix.Close(fd)
	if err != nil {
		return nil, fmt.Errorf("move above fd %d: %w", floor, err)
	}
	return os.NewFile(uintptr(high), path), nil
}

// lockStateRoot takes an exclusive lock on the state root for the life of the
// process: two daemons on one root would corrupt each other's records. The
// kernel drops the lock when the last descriptor of the lock file's open
// file is closed, so a crash leaves no stale lock; but that may be a moment
// after the daemon died. A live daemon on the root is refused at once; a
// lock whose daemon is gone or dying is waited for, up to wait.
func lockStateRoot(root string, wait time.Duration, log *logrus.Entry) (*os.File, error) {
	path := filepath.Join(root, "minicri.lock")
	f, err := openAbove(path, lockFDFloor)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	start := time.Now()
	deadline := start.Add(wait)
	logged := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		daemon := lockDaemon(path)
		if daemon != os.Getpid() && procstat.HoldsFile(daemon, f) && !dying(daemon) {
			f.Close()
			return nil, fmt.Errorf("another minicri (pid %d) is using the state root %s; stop it first or choose another --root", daemon, root)
		}
		if time.Now().After(deadline) {
			holders := procstat.FileHolders(f)
			f.Close()
			return nil, fmt.Errorf("the state root %s is still locked after %s by %s (the minicri that took the lock, pid %d, is gone); stop them or choose another --root",
				root, wait, holders, daemon)
		}
		if !logged {
			log.WithFields(logrus.Fields{"root": root, "locked_by_pid": daemon, "holders": procstat.FileHolders(f).String(), "wait": wait.String()}).
				Warn("the state root is still locked, though the minicri that took the lock is gone or dying: waiting for the lock")
			logged = true
		}
		time.Sleep(rootLockPoll)
	}
	if logged {
		log.WithField("waited", time.Since(start).Round(time.Millisecond).String()).Info("took the state root's lock")
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// lockDaemon is the pid the daemon that took the lock wrote into it; 0 when
// there is none.
func lockDaemon(path string) int {
	data, _ := os.ReadFile(path)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}

// dying is true for a process that is gone, a zombie, or on its way out
// with a SIGKILL pending: it will release what it holds without anyone's help.
func dying(pid int) bool {
	if !procstat.Live(pid) {
		return true
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return true
	}
	const sigkill = 1 << (9 - 1)
	for _, line := range strings.Split(string(status), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if ok && (name == "SigPnd" || name == "ShdPnd") {
			if mask, err := strconv.ParseUint(strings.TrimSpace(value), 16, 64); err == nil && mask&sigkill != 0 {
				return true
			}
		}
	}
	return false
}
