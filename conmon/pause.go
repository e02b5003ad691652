package conmon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/procstat"
)

// Infra is a pod's infra process: PID 1 of the PID namespace the pod's
// containers share.
type Infra struct {
	PID       int
	StartTime uint64
}

// PauseBinaryName is the pod infra process's executable, a static C program
// (cmd/minicri-pause) far smaller than the monitor's Go runtime, which
// confines itself before it tells the daemon it is ready (docs/security.md).
const PauseBinaryName = "minicri-pause"

// ErrNoPauseBinary: minicri-pause is not installed where the daemon looks
// for it. It is built and installed with the daemon (make build, make
// install); a pod that shares its PID namespace cannot start without it.
var ErrNoPauseBinary = errors.New(PauseBinaryName + " not found")

// confineTimeout bounds the wait for an infra process to confine itself, a
// few system calls: only a stuck process takes that long.
const confineTimeout = 30 * time.Second

// StartPause starts `minicri-pause pause` as PID 1 of a new PID namespace,
// detached like a monitor (own session, no stdio once confined)
// so that it outlives the daemon. Containers join its namespace through
// /proc/PID/ns/pid; a PID namespace cannot be pinned by a bind mount the way
// the others are, because it dies with its first process.
//
// podDir (the pod's own directory) labels the process: FindPauses finds it
// by that label, and a daemon only ever claims the pods under its run dir.
func StartPause(binary, podDir string, opts PauseOptions) (Infra, error) {
	return startPause(binary, podDir, opts, &syscall.SysProcAttr{Setsid: true, Cloneflags: unix.CLONE_NEWPID})
}

// PauseOptions are what an infra process confines itself with beyond the
// steps it always takes.
type PauseOptions struct {
	// AppArmorProfile, when set, is a loaded AppArmor profile the process
	// changes to (after its mounts, before it drops its privileges). It
	// fails, and so does the pod, where it cannot.
	AppArmorProfile string
}

// env is the infra process's environment: the monitor's, and the profile
// for minicri-pause to read.
func (o PauseOptions) env() []string {
	env := monitorEnv()
	if o.AppArmorProfile != "" {
		env = append(env, "MINICRI_PAUSE_APPARMOR="+o.AppArmorProfile)
	}
	return env
}

// startPause returns once the infra process has confined itself: no
// container may join a namespace whose PID 1 still holds the daemon's
// privileges. One pipe is its stderr and its fd 3: it writes pauseReady
// on fd 3 once confined, or a message on stderr and exits when a step
// failed, and closes both either way. A failed one is killed and reaped
// before startPause returns.
func startPause(binary, podDir string, opts PauseOptions, attr *syscall.SysProcAttr) (Infra, error) {
	path, err := pauseBinary(binary)
	if err != nil {
		return Infra{}, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return Infra{}, fmt.Errorf("start pod infra process: %w", err)
	}
	defer r.Close()
	cmd := exec.Command(path, "pause", pauseLabel, podDir)
	cmd.Dir = "/"
	cmd.Env = opts.env()
	cmd.Stderr = w
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = attr
	err = cmd.Start()
	w.Close()
	if err != nil {
		return Infra{}, fmt.Errorf("start pod infra process: %w", err)
	}
	pid := cmd.Process.Pid
	// Read before the reaper runs: until then the pid stays ours.
	started, startErr := startTime(pid)
	exited := reapChild(pid)
	in := Infra{PID: pid, StartTime: started}
	err = startErr
	if err == nil {
		err = awaitConfined(r, in)
	}
	if err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
		return Infra{}, fmt.Errorf("pod infra process %s (pid %d): %w", path, pid, err)
	}
	return in, nil
}

// pauseReady is what minicri-pause writes on fd 3 once confined.
const pauseReady = "ready\n"

// awaitConfined reads the infra process's pipe to EOF: pauseReady alone
// means confined; anything else is why it failed.
func awaitConfined(r *os.File, in Infra) error {
	_ = r.SetReadDeadline(time.Now().Add(confineTimeout))
	msg, err := io.ReadAll(io.LimitReader(r, 4096))
	switch {
	case err != nil:
		return fmt.Errorf("wait for its confinement: %w", err)
	case len(msg) == 0:
		return errors.New("closed its pipe before it was confined")
	case string(msg) != pauseReady:
		return errors.New(strings.TrimSpace(strings.TrimSuffix(string(msg), pauseReady)))
	case !Alive(in.PID, in.StartTime):
		return errors.New("ended once confined")
	}
	return nil
}

// pauseBinary is minicri-pause beside the monitor binary (or in $PATH, for
// a monitor found there).
func pauseBinary(monitor string) (string, error) {
	if monitor == "" {
		path, err := exec.LookPath(PauseBinaryName)
		if err != nil {
			return "", fmt.Errorf("%w in $PATH (make install puts it beside minicri-conmon)", ErrNoPauseBinary)
		}
		return path, nil
	}
	beside := filepath.Join(filepath.Dir(monitor), PauseBinaryName)
	if _, err := os.Stat(beside); err != nil {
		return "", fmt.Errorf("%w: %s (make install puts it beside minicri-conmon): %v", ErrNoPauseBinary, beside, err)
	}
	return beside, nil
}

// pauseLabel precedes the pod dir on an infra process's command line.
const pauseLabel = "--pod"

// FindPauses lists the running infra processes by the pod dir they were
// started for, from their command lines. A daemon killed between starting an infra process and
// recording it can only find it this way.
func FindPauses() map[string]Infra {
	found := map[string]Infra{}
	procstat.EachCmdline(func(pid int, cmdline string) {
		args := strings.Split(strings.TrimSuffix(cmdline, "\x00"), "\x00")
		if len(args) != 4 || filepath.Base(args[0]) != PauseBinaryName || args[1] != "pause" || args[2] != pauseLabel {
			return
		}
		if started, err := startTime(pid); err == nil && Alive(pid, started) {
			found[args[3]] = Infra{PID: pid, StartTime: started}
		}
	})
	return found
}

// StopPause kills the infra process, and with it every process left in its
// PID namespace. An infra process that is gone already is fine. It waits
// for the exit as long as ctx allows: a busy node can take more than ten
// seconds to reap a PID namespace, and the caller's deadline (the kubelet's,
// for a pod stop) is the one that says how long is too long.
func StopPause(ctx context.Context, in Infra) error {
	if in.PID <= 0 || !Alive(in.PID, in.StartTime) {
		return nil
	}
	done, err := WatchMonitor(in.PID, in.StartTime)
	if err != nil {
		return err
	}
	if err := unix.Kill(in.PID, unix.SIGKILL); err != nil && err != unix.ESRCH {
		return fmt.Errorf("kill pod infra process %d: %w", in.PID, err)
	}
	start := time.Now()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pod infra process %d not reaped %s after SIGKILL: %w", in.PID, time.Since(start).Round(time.Millisecond), ctx.Err())
	}
}

// NamespacePath is the PID namespace containers of the pod join.
func (in Infra) NamespacePath() string { return fmt.Sprintf("/proc/%d/ns/pid", in.PID) }
