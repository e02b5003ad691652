package conmon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon"
)

// running reports whether pid is a process that has not ended (a zombie has).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && len(b) > i+2 && b[i+2] != 'Z' && b[i+2] != 'X'
}

func TestMonitorIsDetachedFromDaemon(t *testing.T) {
	// Not parallel: it leaks a descriptor and sets the environment on purpose.
	marker := filepath.Join(t.TempDir(), "daemon-only")
	os.WriteFile(marker, nil, 0o600)
	leaked, err := unix.Open(marker, unix.O_RDONLY, 0) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(leaked)
	t.Setenv("CONMON_TEST_DAEMON_ONLY", "1")

	c := newContainer(t, []string{"sleep", "100"}, nil)
	c.run()
	mon := c.created.MonitorPID
	if sid, _ := unix.Getsid(mon); sid != mon {
		t.Errorf("monitor session = %d, want its own (%d)", sid, mon)
	}
	if pgid, _ := unix.Getpgid(mon); pgid != mon {
		t.Errorf("monitor process group = %d, want its own (%d)", pgid, mon)
	}
	for _, fd := range []string{"0", "1", "2"} {
		if target, _ := os.Readlink("/proc/" + strconv.Itoa(mon) + "/fd/" + fd); target != "/dev/null" {
			t.Errorf("monitor fd %s -> %q, want /dev/null", fd, target)
		}
	}
	for _, pid := range []int{mon, c.created.ContainerPID} {
		fds, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/fd/*")
		for _, fd := range fds {
			if target, _ := os.Readlink(fd); target == marker {
				t.Errorf("process %d holds the daemon's descriptor %s -> %s", pid, fd, target)
			}
		}
	}
	env, _ := os.ReadFile("/proc/" + strconv.Itoa(mon) + "/environ")
	if bytes.Contains(env, []byte("CONMON_TEST_DAEMON_ONLY")) {
		t.Error("monitor inherited the daemon's environment")
	}
}

// TestMonitorSurvivesDaemonDeath creates the container from a helper
// process that kills itself, then starts it as a restarted daemon would:
// the container runs, logs and exits with its monitor while no daemon is
// its parent, and the exit file tells how it ended.
func TestMonitorSurvivesDaemonDeath(t *testing.T) {
	t.Parallel()
	c := newContainer(t, []string{"sh", "-c", "echo before; usleep 300000; echo after; exit 7"}, nil)
	opts, _ := json.Marshal(c.opts)
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+string(opts))
	out, err := helper.Output()
	if err != nil {
		t.Fatalf("helper daemon: %v: %s", err, out)
	}
	if err := json.Unmarshal(out, &c.created); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	if !conmon.Alive(c.created.MonitorPID, c.created.MonitorStartTime) {
		t.Fatal("monitor died with the daemon that started it")
	}
	c.runc("start", c.id)
	if e := c.waitExit(10 * time.Second); e.Code != 7 {
		t.Errorf("exit code = %d, want 7", e.Code)
	}
	if got := lines(readLog(t, c.opts.LogPath)); strings.Join(got, ",") != "before,after" {
		t.Errorf("log lines = %q, want before, after", got)
	}
}

func TestWatchMonitorFiresWhenMonitorIsKilled(t *testing.T) {
	t.Parallel()
	c := newContainer(t, []string{"sleep", "100"}, nil)
	c.run()
	gone, err := conmon.WatchMonitor(c.created.MonitorPID, c.created.MonitorStartTime)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-gone:
		t.Fatal("WatchMonitor fired while the monitor runs")
	case <-time.After(100 * time.Millisecond):
	}
	unix.Kill(c.created.MonitorPID, unix.SIGKILL)
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("WatchMonitor did not fire within 5s of kill -9")
	}
	if conmon.Alive(c.created.MonitorPID, c.created.MonitorStartTime) {
		t.Error("Alive after kill -9")
	}
	if _, ok, _ := conmon.ReadExit(c.opts.ExitFile); ok {
		t.Error("an exit file exists although the container still runs")
	}
	if !running(c.created.ContainerPID) {
		t.Error("the container died with its monitor")
	}
}

func TestWatchMonitorOfGoneProcess(t *testing.T) {
	self, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		pid   int
		start uint64
	}{
		{"no such pid", 1 << 22, 1},
		{"pid reused", os.Getpid(), 1}, // this process did not start at tick 1
	} {
		t.Run(tc.name, func(t *testing.T) {
			gone, err := conmon.WatchMonitor(tc.pid, tc.start)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-gone:
			default:
				t.Fatalf("channel open for %s (/proc/self/stat %q)", tc.name, self)
			}
			if conmon.Alive(tc.pid, tc.start) {
				t.Error("Alive is true")
			}
		})
	}
}

func TestCreateFailureLeavesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		edit    func(*specs.Spec, *conmon.Options)
		message string // part of runc's error
	}{
		{"missing bundle", func(_ *specs.Spec, o *conmon.Options) { o.Bundle += "-missing" }, "no such file or directory"},
		{"missing executable", func(s *specs.Spec, _ *conmon.Options) { s.Process.Args = []string{"/no/such/binary"} }, "no such file or directory"},
		// Found only after runc's create succeeded: the container must go again.
		{"missing log directory", func(_ *specs.Spec, o *conmon.Options) { o.LogPath = filepath.Join(o.LogPath+".d", "0.log") }, "open log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newContainer(t, []string{"true"}, nil)
			spec := readSpec(t, c)
			tc.edit(spec, &c.opts)
			writeSpec(t, c, spec)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := conmon.Create(ctx, c.opts)
			if !errors.Is(err, conmon.ErrCreateFailed) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("Create: %v, want ErrCreateFailed with %q", err, tc.message)
			}
			assertNothingLeft(t, c)
		})
	}
}

func assertNothingLeft(t *testing.T, c *container) {
	t.Helper()
	for _, pid := range processesMentioning(c.id) {
		if running(pid) {
			t.Errorf("process %d still runs for container %s", pid, c.id)
		}
		reapAdopted(pid)
	}
	if _, err := os.Stat(filepath.Join(c.opts.RuntimeRoot, c.id)); !os.IsNotExist(err) {
		t.Errorf("runc state for %s left: %v", c.id, err)
	}
	if entries, _ := os.ReadDir(c.opts.SocketDir); len(entries) > 0 {
		t.Errorf("socket dir keeps %d entries, first %s", len(entries), entries[0].Name())
	}
	for _, path := range []string{c.opts.LogPath, c.opts.ExitFile} {
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", path, err)
		}
	}
}

func TestCreateHonoursDeadline(t *testing.T) {
	t.Parallel()
	runtime, pidFile := hangingRuntime(t)
	c := newContainer(t, []string{"true"}, func(_ *specs.Spec, o *conmon.Options) { o.Runtime = runtime })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	began := time.Now()
	_, err := conmon.Create(ctx, c.opts)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Create with a hanging runtime: %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("Create took %v to give up after a 1s deadline", took)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the runtime never ran: %v", err)
	}
	hung, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitFor(t, "the hanging runtime to be killed", 5*time.Second, func() bool { return !running(hung) })
	reapAdopted(hung)
	assertNothingLeft(t, c)
}

// TestPauseReapsOrphansAndExitsOnTerm runs minicri-pause as a container's
// init, orphans a process inside, and expects it reaped; then SIGTERM ends
// it with exit code 0. The container holds the capabilities the program
// confines itself with, as the daemon's root does.
func TestPauseReapsOrphansAndExitsOnTerm(t *testing.T) {
	c := newContainer(t, []string{"/minicri-pause", "pause"}, func(spec *specs.Spec, _ *conmon.Options) {
		caps := []string{"CAP_SYS_ADMIN", "CAP_SETPCAP", "CAP_SETGID", "CAP_SETUID"}
		spec.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	})
	c.run()
	pause := strconv.Itoa(c.created.ContainerPID)
	// Into its PID namespace only: its mount namespace is its own, empty
	// one, where runc exec would find no shell.
	if out, err := exec.Command("nsenter", "--target", pause, "--pid", "--", "/bin/sh", "-c", "sleep 1 >/dev/null 2>&1 & exit 0").CombinedOutput(); err != nil {
		t.Fatalf("orphan a process in the infra's PID namespace: %v: %s", err, out)
	}
	children := func() string {
		b, _ := os.ReadFile("/proc/" + pause + "/task/" + pause + "/children")
		return string(bytes.TrimSpace(b))
	}
	waitFor(t, "pause to adopt the orphaned sleep", 5*time.Second, func() bool { return children() != "" })
	// A child that ended but was not reaped stays listed, as a zombie.
	waitFor(t, "pause to reap the orphaned sleep", 5*time.Second, func() bool { return children() == "" })
	c.runc("kill", c.id, "TERM")
	if e := c.waitExit(10 * time.Second); e.Code != 0 {
		t.Errorf("pause exit code on SIGTERM = %d, want 0", e.Code)
	}
}

func TestStartPauseAndStopPause(t *testing.T) {
	requireRuntime(t)
	podDir := t.TempDir()
	infra, err := conmon.StartPause(monitorBinary, podDir, conmon.PauseOptions{})
	if err != nil {
		t.Fatalf("StartPause: %v", err)
	}
	t.Cleanup(func() { conmon.StopPause(context.Background(), infra) })
	if rec, err := conmon.RecordedInfra(podDir); err != nil || rec != infra {
		t.Errorf("RecordedInfra(%s) = %+v (%v), want %+v", podDir, rec, err, infra)
	}
	if !conmon.Alive(infra.PID, infra.StartTime) {
		t.Fatal("infra process not alive after StartPause")
	}
	self, _ := os.Readlink("/proc/self/ns/pid")
	if ns, err := os.Readlink(infra.NamespacePath()); err != nil || ns == self {
		t.Fatalf("infra PID namespace %q (err %v), want a new one, not %q", ns, err, self)
	}
	// The C one, found beside the monitor, not the monitor's Go one: its
	// sealed copy (pause_sealed.go) has the same bytes.
	want, err := os.ReadFile(pauseBinary)
	if err != nil {
		t.Fatal(err)
	}
	if exe, err := os.ReadFile(fmt.Sprintf("/proc/%d/exe", infra.PID)); err != nil || !bytes.Equal(exe, want) {
		t.Errorf("infra process runs %d bytes (%v), not the %d of %s", len(exe), err, len(want), pauseBinary)
	}
	if err := conmon.StopPause(context.Background(), infra); err != nil {
		t.Fatalf("StopPause: %v", err)
	}
	if conmon.Alive(infra.PID, infra.StartTime) {
		t.Error("infra process alive after StopPause")
	}
}
