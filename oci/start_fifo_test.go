package oci

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/config"
)

// forEachRunc runs test, bounded by ctx, with each runc release a start by
// the fifo must work with: Debian's, and the runc-current handler's that
// make deps builds.
func forEachRunc(t *testing.T, test func(t *testing.T, ctx context.Context, rt *Runtime)) {
	rts := map[string]*Runtime{"debian": testRuntime(t, "runc")}
	if fileExists(config.CurrentRuncPath) {
		rts["current"] = &Runtime{Path: config.CurrentRuncPath, Root: t.TempDir()}
	}
	for name, rt := range rts {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			test(t, ctx, rt)
		})
	}
}

// debianRunc is Debian's runc, with a context that bounds the test.
func debianRunc(t *testing.T) (*Runtime, context.Context) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return testRuntime(t, "runc"), ctx
}

// TestStartContainerByFifo: the start takes the init's byte itself, runc
// then reports the container running, and its process runs.
func TestStartContainerByFifo(t *testing.T) {
	forEachRunc(t, func(t *testing.T, ctx context.Context, rt *Runtime) {
		c := baseSpec(t, "/bin/sh", "-c", "echo started; exec sleep 60")
		tc := createContainer(t, rt, c)
		if err := rt.startByFifo(ctx, c.ID); err != nil {
			t.Fatalf("startByFifo: %v, want the fifo start taken", err)
		}
		if _, err := os.Stat(filepath.Join(rt.Root, c.ID, runcExecFifo)); !os.IsNotExist(err) {
			t.Errorf("exec fifo still there after the start: %v", err)
		}
		if st, err := rt.State(ctx, c.ID); err != nil || st.Status != StatusRunning {
			t.Fatalf("state after the start = %+v, %v; want running", st, err)
		}
		waitForOutput(t, tc.out, "started")
		// A second start is runc's to refuse, as for any started container.
		if err := rt.Start(ctx, c.ID); err == nil {
			t.Errorf("second Start succeeded, want runc's refusal")
		}
	})
}

// TestStartContainerWhoseInitDied: an init killed before the start fails it
// at once, as runc start does, and leaves the fifo for runc's delete.
func TestStartContainerWhoseInitDied(t *testing.T) {
	forEachRunc(t, func(t *testing.T, ctx context.Context, rt *Runtime) {
		c := baseSpec(t, "/bin/true")
		tc := createContainer(t, rt, c)
		st, err := readRuncState(filepath.Join(rt.Root, c.ID))
		if err != nil {
			t.Fatal(err)
		}
		fd, err := openInit(st.InitPID, st.InitStart)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if err := unix.Kill(tc.pid, unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// Not reaped: a zombie, as the monitor's wait would leave it
		// an instant, or gone once reaped; both must fail the start.
		begin := time.Now()
		err = rt.Start(ctx, c.ID)
		if err == nil {
			t.Fatal("Start of a container whose init was killed succeeded")
		}
		if ctx.Err() != nil || time.Since(begin) > 10*time.Second {
			t.Fatalf("Start waited for its context: %v", err)
		}
		if _, err := tc.wait(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		tc.pid = 0
		if err := rt.Delete(ctx, c.ID, true); err != nil {
			t.Fatalf("Delete after the failed start: %v", err)
		}
		if _, err := os.Stat(filepath.Join(rt.Root, c.ID)); !os.IsNotExist(err) {
			t.Errorf("runc state dir left after delete: %v", err)
		}
	})
}

// TestStartByFifoDefersToRuntime: where runc start would do more than the
// fifo, or the layout is not runc's, nothing is touched and runc start runs.
func TestStartByFifoDefersToRuntime(t *testing.T) {
	rt, ctx := debianRunc(t)
	c := baseSpec(t, "/bin/sleep", "60")
	createContainer(t, rt, c)
	fifo := filepath.Join(rt.Root, c.ID, runcExecFifo)
	cases := []struct {
		name string
		rt   *Runtime
	}{
		{"no root", &Runtime{Path: rt.Path}},
		{"another root", &Runtime{Path: rt.Path, Root: t.TempDir()}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.rt.startByFifo(ctx, c.ID); !errors.Is(err, errNoFifoStart) {
				t.Fatalf("startByFifo = %v, want errNoFifoStart", err)
			}
			if !fileExists(fifo) {
				t.Fatal("the exec fifo was taken")
			}
		})
	}
}

// Under minicri.service (Type=notify) systemd hands the daemon
// NOTIFY_SOCKET. It is the daemon's: containers start by the fifo all the
// same, and `runc start` (a poststart hook) does not see it, which failed
// in the Debian 12 guest with 'listen unixgram …/notify/notify.sock: bind:
// invalid argument'.
func TestStartUnderSystemdNotifySocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_PID", "1")
	rt, ctx := debianRunc(t)
	c := baseSpec(t, "/bin/sleep", "60")
	createContainer(t, rt, c)
	fifo := filepath.Join(rt.Root, c.ID, runcExecFifo)
	if err := rt.Start(ctx, c.ID); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if fileExists(fifo) {
		t.Error("the exec fifo is still there: the start did not go by the fifo")
	}
	hooked := baseSpec(t, "/bin/sleep", "60")
	createEditedContainer(t, rt, hooked, func(s *specs.Spec) {
		s.Hooks = &specs.Hooks{Poststart: []specs.Hook{{Path: "/bin/true"}}}
	})
	if err := rt.Start(ctx, hooked.ID); err != nil {
		t.Fatalf("runc start with the daemon's NOTIFY_SOCKET set: %v", err)
	}
}

// Every runtime command's environment leaves out what systemd handed the
// daemon, and keeps the rest.
func TestRuntimeEnvLeavesOutSystemdVariables(t *testing.T) {
	for _, k := range SystemdHandedEnv {
		t.Setenv(k, "x")
	}
	t.Setenv("MINICRI_TEST_KEEP", "1")
	rt := &Runtime{Path: "/bin/true", Root: t.TempDir()}
	cmd, err := rt.command(context.Background(), "", "state", "x")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*exec.Cmd{cmd, rt.execCommand("/bin/true", "pid", "x", false), rt.execCommand("/bin/true", "pid", "x", true)} {
		if c.Env == nil {
			t.Fatalf("%v inherits the daemon's environment", c.Args)
		}
		for _, kv := range c.Env {
			if slices.Contains(SystemdHandedEnv, envKey(kv)) {
				t.Errorf("%v gets %s", c.Args, kv)
			}
		}
		if !slices.Contains(c.Env, "MINICRI_TEST_KEEP=1") {
			t.Errorf("%v lost the rest of the environment", c.Args)
		}
	}
}

// TestStartWithPoststartHookRunsRuntimeStart: a container with a poststart
// hook is left to runc start, which runs the hook.
func TestStartWithPoststartHookRunsRuntimeStart(t *testing.T) {
	forEachRunc(t, func(t *testing.T, ctx context.Context, rt *Runtime) {
		mark := filepath.Join(t.TempDir(), "poststart-ran")
		c := baseSpec(t, "/bin/sleep", "60")
		createEditedContainer(t, rt, c, func(s *specs.Spec) {
			s.Hooks = &specs.Hooks{Poststart: []specs.Hook{{Path: "/bin/sh", Args: []string{"sh", "-c", "touch " + mark}}}}
		})
		if err := rt.startByFifo(ctx, c.ID); !errors.Is(err, errNoFifoStart) {
			t.Fatalf("startByFifo = %v, want errNoFifoStart for a poststart hook", err)
		}
		if err := rt.Start(ctx, c.ID); err != nil {
			t.Fatalf("Start: %v", err)
		}
		if !fileExists(mark) {
			t.Error("the poststart hook did not run")
		}
	})
}

// waitForOutput polls a container's output file for want.
func waitForOutput(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := os.ReadFile(path)
		if strings.Contains(string(out), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("container output %q, want %q", out, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
