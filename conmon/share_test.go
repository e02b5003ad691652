package conmon_test

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/conmon/wire"
	"github.com/minicri/minicri/internal/procstat"
)

// TestSharedMonitorServesSeveralContainers runs three containers in one
// monitor: each has its own log, sockets and exit status, one ending does
// not end the others, and the monitor exits with the last, taking its join
// directory with it.
func TestSharedMonitorServesSeveralContainers(t *testing.T) {
	joinDir := filepath.Join(t.TempDir(), "m")
	if err := os.Mkdir(joinDir, 0o700); err != nil {
		t.Fatal(err)
	}
	first := newContainer(t, []string{"sh", "-c", "echo first; exec sleep 1000"}, func(_ *specs.Spec, o *conmon.Options) { o.JoinDir = joinDir })
	first.run()
	killed := newContainer(t, []string{"sh", "-c", "echo killed; exec sleep 1000"}, nil)
	killed.join(joinDir)
	three := newContainer(t, []string{"sh", "-c", "read x; echo three $x; exit 3"}, func(_ *specs.Spec, o *conmon.Options) { o.Stdin = true })
	three.join(joinDir)
	for _, c := range []*container{killed, three} {
		if c.created.MonitorPID != first.created.MonitorPID || c.created.MonitorStartTime != first.created.MonitorStartTime {
			t.Fatalf("joined monitor %d, want the shared monitor %d", c.created.MonitorPID, first.created.MonitorPID)
		}
		if c.created.ContainerPID == first.created.ContainerPID {
			t.Fatalf("joined container reports the first container's pid %d", c.created.ContainerPID)
		}
	}

	waitFor(t, "the first two containers' lines", 5*time.Second, func() bool {
		return logHas(first, "first") && logHas(killed, "killed")
	})

	killed.runc("kill", killed.id, "KILL")
	if e := killed.waitDone(5 * time.Second); e.Code != 137 {
		t.Errorf("killed container exit code %d, want 137", e.Code)
	}
	// Attach still reaches the third container through the same monitor.
	attached := make(chan error, 1)
	go func() {
		attached <- conmon.Attach(context.Background(), three.opts.SocketDir, strings.NewReader("ok\n"), io.Discard, io.Discard, nil)
	}()
	if e := three.waitDone(5 * time.Second); e.Code != 3 {
		t.Errorf("third container exit code %d, want 3", e.Code)
	}
	select {
	case err := <-attached:
		if err != nil {
			t.Errorf("Attach to a joined container: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("Attach did not end with the container")
	}
	if !logHas(three, "three ok") {
		t.Errorf("third container's log %q lacks its line", lines(readLog(t, three.opts.LogPath)))
	}
	if !conmon.Alive(first.created.MonitorPID, first.created.MonitorStartTime) {
		t.Fatal("the shared monitor exited while it still served a container")
	}
	if logHas(first, "killed") || logHas(killed, "first") {
		t.Error("one container's output landed in another's log")
	}

	first.runc("kill", first.id, "KILL")
	first.waitExit(5 * time.Second)
	if _, err := os.Stat(joinDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("join dir after the monitor exited: %v, want it gone", err)
	}
	late := newContainer(t, []string{"true"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := conmon.Join(ctx, joinDir, late.opts); !errors.Is(err, conmon.ErrJoinRefused) {
		t.Errorf("Join after the monitor exited: %v, want ErrJoinRefused", err)
	}
}

// TestJoinFailureLeavesNothing: a create the runtime refuses comes back as
// ErrCreateFailed with nothing of the container left, and the shared
// monitor goes on serving the rest.
func TestJoinFailureLeavesNothing(t *testing.T) {
	joinDir, first := runSharedMonitor(t)
	bad := newContainer(t, []string{"/no/such/binary"}, func(s *specs.Spec, _ *conmon.Options) { s.Process.Cwd = "relative" })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := conmon.Join(ctx, joinDir, bad.opts)
	if !errors.Is(err, conmon.ErrCreateFailed) {
		t.Fatalf("Join of a bad spec: %v, want ErrCreateFailed", err)
	}
	if _, err := os.Stat(bad.opts.LogPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("log file of the failed create: %v, want none", err)
	}
	wantNothingLeftOfJoin(t, "a failed join", bad, first, joinDir)
}

// wantNothingLeftOfJoin checks what a join that failed or was given up
// leaves: nothing in c's socket directory, and the shared monitor of
// first still serving and taking the next join.
func wantNothingLeftOfJoin(t *testing.T, what string, c, first *container, joinDir string) {
	t.Helper()
	entries, _ := os.ReadDir(c.opts.SocketDir)
	for _, e := range entries {
		t.Errorf("left in the socket dir after %s: %s", what, e.Name())
	}
	if !conmon.Alive(first.created.MonitorPID, first.created.MonitorStartTime) {
		t.Fatalf("%s ended the shared monitor", what)
	}
	next := newContainer(t, []string{"sh", "-c", "echo next"}, nil)
	next.join(joinDir)
	if e := next.waitDone(5 * time.Second); e.Code != 0 {
		t.Errorf("container joined after %s: exit %d, want 0", what, e.Code)
	}
}

func logHas(c *container, line string) bool {
	b, err := os.ReadFile(c.opts.LogPath)
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasSuffix(l, " F "+line) {
			return true
		}
	}
	return false
}

// TestJoinTerminalInLongDirectories: a tty container joins a shared monitor
// whose join directory and its own socket directory are both longer than
// sun_path holds; the pty master comes over to the monitor, resize and
// stdin reach the container, and the log reopens.
func TestJoinTerminalInLongDirectories(t *testing.T) {
	long := strings.Repeat("long-directory-name-", 6)
	joinDir := filepath.Join(t.TempDir(), long)
	if err := os.Mkdir(joinDir, 0o700); err != nil {
		t.Fatal(err)
	}
	first := newContainer(t, []string{"sleep", "1000"}, func(_ *specs.Spec, o *conmon.Options) { o.JoinDir = joinDir })
	first.run()
	tty := newContainer(t, []string{"sh"}, func(s *specs.Spec, o *conmon.Options) {
		o.SocketDir = filepath.Join(o.SocketDir, long)
		s.Process.Terminal = true
		o.Terminal, o.Stdin = true, true
	})
	if len(tty.opts.SocketDir) <= 108 || len(joinDir+"/join") <= 108 {
		t.Fatalf("directories of %d and %d bytes, want more than sun_path holds", len(tty.opts.SocketDir), len(joinDir))
	}
	tty.join(joinDir)
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	if err := conmon.ReopenLog(ctx, tty.opts.SocketDir); err != nil {
		t.Fatalf("ReopenLog of a joined container: %v", err)
	}
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	resize := make(chan conmon.Size, 1)
	resize <- conmon.Size{Rows: 21, Cols: 65}
	var stdout syncBuffer
	done := attach(tty, context.Background(), stdinR, &stdout, nil, resize)
	waitForTTYSize(t, stdinW, &stdout, "21 65")
	io.WriteString(stdinW, "exit 4\n")
	if err := waitAttach(t, done, 10*time.Second); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if e := tty.waitDone(10 * time.Second); e.Code != 4 {
		t.Errorf("exit code = %d, want 4", e.Code)
	}
	if !conmon.Alive(first.created.MonitorPID, first.created.MonitorStartTime) {
		t.Error("the shared monitor ended with the tty container")
	}
}

// TestJoinHonoursDeadline: a join whose runtime hangs gives up at the
// deadline with the helper and the runtime killed and nothing left, and
// the shared monitor serves on and takes the next container.
func TestJoinHonoursDeadline(t *testing.T) {
	joinDir, first := runSharedMonitor(t)

	hanging, pidFile := hangingRuntime(t)
	c := newContainer(t, []string{"true"}, func(_ *specs.Spec, o *conmon.Options) { o.Runtime = hanging })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := conmon.Join(ctx, joinDir, c.opts); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Join with a hanging runtime: %v, want context.DeadlineExceeded", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the runtime never ran: %v", err)
	}
	hung, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	// Gone, zombie included: the monitor reaps what the helper left.
	waitFor(t, "the hanging runtime to be killed and reaped", 5*time.Second, func() bool {
		_, err := os.Stat("/proc/" + strconv.Itoa(hung))
		return err != nil
	})
	assertNothingLeft(t, c)
	if !conmon.Alive(first.created.MonitorPID, first.created.MonitorStartTime) {
		t.Fatal("a join past its deadline ended the shared monitor")
	}
	next := newContainer(t, []string{"true"}, nil)
	next.join(joinDir)
	if e := next.waitDone(5 * time.Second); e.Code != 0 {
		t.Errorf("container joined after a timed-out join: exit %d, want 0", e.Code)
	}
}

// TestWatchRightAfterJoin: the daemon watches a container the moment its
// join returns, while the join helper exits and the monitor gets its
// SIGCHLD (here: a stream of them). A watch must only end with its
// container.
func TestWatchRightAfterJoin(t *testing.T) {
	joinDir, first := runSharedMonitor(t)
	// What a helper's exit does, many times over: a SIGCHLD at any moment.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				syscall.Kill(first.created.MonitorPID, syscall.SIGCHLD)
				time.Sleep(50 * time.Microsecond)
			}
		}
	}()
	var watches []<-chan struct{}
	for i := 0; i < 7; i++ {
		c := newContainer(t, []string{"sleep", "1000"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		created, err := conmon.Join(ctx, joinDir, c.opts)
		cancel()
		if err != nil {
			t.Fatalf("Join: %v", err)
		}
		c.created, c.joined = created, true
		// As the daemon does: before the start, at once.
		done, err := watchContainer(c.opts.SocketDir)
		if err != nil {
			t.Fatalf("WatchContainer: %v", err)
		}
		watches = append(watches, done)
		c.runc("start", c.id)
	}
	time.Sleep(200 * time.Millisecond)
	for i, done := range watches {
		select {
		case <-done:
			t.Errorf("the watch of running container %d ended", i+1)
		default:
		}
	}
}

// TestJoinCreatesOnlyOnceFinished: a join's helper starts and prepares
// while the daemon completes the bundle, and runs the runtime's create only
// at Finish: until then it waits on the connection, no runtime has run, and
// the bundle need not hold config.json yet.
func TestJoinCreatesOnlyOnceFinished(t *testing.T) {
	joinDir, first := runSharedMonitor(t)
	late := newContainer(t, []string{"sh", "-c", "echo late"}, nil)
	spec := readSpec(t, late)
	if err := os.Remove(filepath.Join(late.opts.Bundle, "config.json")); err != nil {
		t.Fatal(err)
	}
	p := beginJoin(t, joinDir, late)
	waitForHelperAwaitingGo(t, late.id)
	if _, err := os.Stat(filepath.Join(late.opts.RuntimeRoot, late.id)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the runtime's state of %s before Finish: %v, want none", late.id, err)
	}
	writeSpec(t, late, spec)
	created, err := p.Finish()
	if err != nil {
		t.Fatalf("Finish once the bundle is complete: %v", err)
	}
	if created.MonitorPID != first.created.MonitorPID {
		t.Errorf("joined monitor %d, want the shared monitor %d", created.MonitorPID, first.created.MonitorPID)
	}
	late.created, late.joined = created, true
	late.runc("start", late.id)
	if e := late.waitDone(5 * time.Second); e.Code != 0 || !logHas(late, "late") {
		t.Errorf("joined container: exit %d, logged %v; want 0 and its line", e.Code, logHas(late, "late"))
	}
}

// TestCancelledJoinLeavesNothing: a join given up before Finish (the
// daemon's bundle failed) ends its helper, which removes what it made, by
// the time Cancel returns; the shared monitor takes the next join.
func TestCancelledJoinLeavesNothing(t *testing.T) {
	joinDir, first := runSharedMonitor(t)
	given := newContainer(t, []string{"sh", "-c", "echo never"}, nil)
	p := beginJoin(t, joinDir, given)
	helper := waitForHelperAwaitingGo(t, given.id)
	p.Cancel()
	if procstat.Live(helper) { // a zombie the monitor has yet to reap is gone enough
		t.Errorf("join helper %d still runs after Cancel", helper)
	}
	if _, err := os.Stat(filepath.Join(given.opts.RuntimeRoot, given.id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the runtime's state of a cancelled join: %v, want none", err)
	}
	wantNothingLeftOfJoin(t, "a cancelled join", given, first, joinDir)
}

// runSharedMonitor runs a sleeping container whose monitor takes further
// containers, and returns the monitor's join directory and the container.
func runSharedMonitor(t *testing.T) (string, *container) {
	t.Helper()
	joinDir := filepath.Join(t.TempDir(), "m")
	if err := os.Mkdir(joinDir, 0o700); err != nil {
		t.Fatal(err)
	}
	first := newContainer(t, []string{"sleep", "1000"}, func(_ *specs.Spec, o *conmon.Options) { o.JoinDir = joinDir })
	first.run()
	return joinDir, first
}

// beginJoin begins c's join of the shared monitor in joinDir.
func beginJoin(t *testing.T, joinDir string, c *container) *conmon.PendingJoin {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	p, err := conmon.BeginJoin(ctx, joinDir, c.opts)
	if err != nil {
		t.Fatalf("BeginJoin: %v", err)
	}
	return p
}

// waitForHelperAwaitingGo finds the join helper of container id and waits
// until it blocks reading its connection (fd 3) for the daemon's go, the
// step before the runtime's create; it returns the helper's pid.
func waitForHelperAwaitingGo(t *testing.T, id string) int {
	t.Helper()
	var helper int
	waitFor(t, "the join helper of "+id+" to wait for its go", 10*time.Second, func() bool {
		procstat.EachCmdline(func(pid int, cmdline string) {
			if strings.HasPrefix(cmdline, "minicri-conmon\x00join\x00") && strings.Contains(cmdline, "\x00"+id+"\x00") {
				helper = pid
			}
		})
		// read(2) is syscall 0 on amd64: "0 0x3 ..." while blocked on fd 3,
		// on whichever of the helper's threads runs the read.
		calls, _ := filepath.Glob("/proc/" + strconv.Itoa(helper) + "/task/*/syscall")
		for _, c := range calls {
			if call, err := os.ReadFile(c); err == nil && strings.HasPrefix(string(call), "0 0x3 ") {
				return true
			}
		}
		return false
	})
	return helper
}

// TestStopCreateEndsAJoinUnderWay: a daemon that died during a join leaves
// its helper creating; the next daemon's StopCreate finds the helper by the
// creator file in the container's socket dir and ends it, and only it: the
// shared monitor above it goes on serving its container. A create that is
// over leaves no creator file.
func TestStopCreateEndsAJoinUnderWay(t *testing.T) {
	joinDir, first := runSharedMonitor(t)
	if _, err := os.Stat(filepath.Join(first.opts.SocketDir, wire.CreatorFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("creator file after the create: %v, want none", err)
	}
	cut := newContainer(t, []string{"sh", "-c", "echo never"}, nil)
	p := beginJoin(t, joinDir, cut)
	helper := waitForHelperAwaitingGo(t, cut.id)
	if err := conmon.StopCreate(cut.opts.SocketDir); err != nil {
		t.Fatalf("StopCreate: %v", err)
	}
	if procstat.Live(helper) {
		t.Errorf("join helper %d still runs after StopCreate", helper)
	}
	if !conmon.Alive(first.created.MonitorPID, first.created.MonitorStartTime) {
		t.Fatalf("StopCreate of a join ended the shared monitor %d", first.created.MonitorPID)
	}
	if _, err := p.Finish(); err == nil {
		t.Errorf("Finish of a stopped join succeeded")
	}
	out, err := exec.Command("runc", "--root", first.opts.RuntimeRoot, "state", first.id).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"running"`) {
		t.Errorf("the shared monitor's container after StopCreate of a join: %v: %s", err, out)
	}
}
