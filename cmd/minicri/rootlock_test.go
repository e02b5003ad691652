package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	"golang.org/x/sys/unix"
)

// holdLock starts a process that holds the state root's lock through a
// descriptor it inherited, as a child forked by a daemon does, and writes
// recorded as the pid of the daemon that took it. It returns the holder.
func holdLock(t *testing.T, root string, recorded func(holder int) int) *exec.Cmd {
	t.Helper()
	path := filepath.Join(root, "minicri.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := os.WriteFile(path, []byte(strconv.Itoa(recorded(cmd.Process.Pid))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// goneProcess is the pid of a process that ran and was reaped.
func goneProcess(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestLockStateRootRefusesALiveDaemonAtOnce(t *testing.T) {
	root := t.TempDir()
	holder := holdLock(t, root, func(holder int) int { return holder })
	log, _ := test.NewNullLogger()
	start := time.Now()
	_, err := lockStateRoot(root, 10*time.Second, logrus.NewEntry(log))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("another minicri (pid %d)", holder.Process.Pid)) {
		t.Fatalf("err = %v, want another minicri naming pid %d", err, holder.Process.Pid)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Errorf("refused after %s: a live daemon on the root is refused at once", waited)
	}
}

// TestLockStateRootWaitsForAGoneDaemonsHeir: the daemon that took the lock
// is gone, but a process holds its descriptor: the next daemon waits,
// says once who holds it, and takes the lock when that process exits.
func TestLockStateRootWaitsForAGoneDaemonsHeir(t *testing.T) {
	root := t.TempDir()
	holder := holdLock(t, root, func(int) int { return goneProcess(t) })
	log, hook := test.NewNullLogger()
	log.SetOutput(io.Discard)
	type result struct {
		f   *os.File
		err error
	}
	done := make(chan result, 1)
	go func() {
		f, err := lockStateRoot(root, 30*time.Second, logrus.NewEntry(log))
		done <- result{f, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(hook.AllEntries()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no log line about the wait within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("lockStateRoot returned (%v, %v) while the lock was held", r.f, r.err)
	default:
	}
	if holders, _ := hook.LastEntry().Data["holders"].(string); !strings.Contains(holders, fmt.Sprintf("pid %d (sleep 60)", holder.Process.Pid)) {
		t.Errorf("the wait's log names holders %q, want pid %d (sleep 60)", holders, holder.Process.Pid)
	}
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("lockStateRoot after the holder exited: %v", r.err)
		}
		defer r.f.Close()
		if got := lockDaemon(filepath.Join(root, "minicri.lock")); got != os.Getpid() {
			t.Errorf("the lock file names pid %d, want ours %d", got, os.Getpid())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lock was not taken within 10 s of its holder's exit")
	}
	if n := len(hook.AllEntries()); n != 2 {
		t.Errorf("%d log lines about the wait, want 2: one when it began, one when it ended", n)
	}
}

func TestLockStateRootGivesUpAfterTheWait(t *testing.T) {
	root := t.TempDir()
	holder := holdLock(t, root, func(int) int { return goneProcess(t) })
	log, _ := test.NewNullLogger()
	_, err := lockStateRoot(root, 300*time.Millisecond, logrus.NewEntry(log))
	if err == nil || !strings.Contains(err.Error(), "still locked") || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", holder.Process.Pid)) {
		t.Fatalf("err = %v, want still locked, naming holder %d", err, holder.Process.Pid)
	}
}

// The lock's descriptor lies above every one a child is handed (the infra
// process gets fds 3 to 5): a child between its fork and its exec never
// closes its copy of the lock by a dup2 while it still holds the daemon's
// listening sockets, so a next daemon that took the lock never finds the
// old one's sockets answering.
func TestTheLockIsAboveHandedDescriptors(t *testing.T) {
	root := t.TempDir()
	f, err := lockStateRoot(root, time.Second, logrus.NewEntry(logrus.New()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const handed = 3 + 3 // stdio and the infra process's three ExtraFiles
	if int(f.Fd()) < handed {
		t.Errorf("the lock is fd %d, among the %d a child is handed", f.Fd(), handed)
	}
	if flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("the lock's descriptor is not close-on-exec (flags %#x, %v)", flags, err)
	}
}
