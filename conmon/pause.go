package conmon

import (
	"fmt"
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
// (cmd/minicri-pause) far smaller than the monitor's Go runtime. Where it is
// not installed next to the monitor, `minicri-conmon pause` does the same.
const PauseBinaryName = "minicri-pause"

// StartPause starts `minicri-pause pause` (or `minicri-conmon pause`) as PID
// 1 of a new PID namespace, detached like a monitor (own session, stdio on
// /dev/null) so that it outlives the daemon. Containers join its namespace through
// /proc/PID/ns/pid; a PID namespace cannot be pinned by a bind mount the way
// the others are, because it dies with its first process.
//
// podDir (the pod's own directory) labels the process: FindPauses finds it
// by that label, and a daemon only ever claims the pods under its run dir.
func StartPause(binary, podDir string) (Infra, error) {
	return startPause(binary, podDir, &syscall.SysProcAttr{Setsid: true, Cloneflags: unix.CLONE_NEWPID})
}

func startPause(binary, podDir string, attr *syscall.SysProcAttr) (Infra, error) {
	cmd := exec.Command(pauseBinary(binary), "pause", pauseLabel, podDir)
	cmd.Dir = "/"
	cmd.Env = monitorEnv()
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return Infra{}, fmt.Errorf("start pod infra process: %w", err)
	}
	pid := cmd.Process.Pid
	reapChild(pid)
	started, err := startTime(pid)
	if err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return Infra{}, fmt.Errorf("pod infra process %d: %w", pid, err)
	}
	return Infra{PID: pid, StartTime: started}, nil
}

// pauseBinary is minicri-pause when it is beside the monitor binary (or in
// $PATH, for a monitor found there), else the monitor itself.
func pauseBinary(monitor string) string {
	if monitor == "" {
		if path, err := exec.LookPath(PauseBinaryName); err == nil {
			return path
		}
		return BinaryName
	}
	beside := filepath.Join(filepath.Dir(monitor), PauseBinaryName)
	if _, err := os.Stat(beside); err == nil {
		return beside
	}
	return monitor
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
		if len(args) != 4 || !isPauseBinary(filepath.Base(args[0])) || args[1] != "pause" || args[2] != pauseLabel {
			return
		}
		if started, err := startTime(pid); err == nil && Alive(pid, started) {
			found[args[3]] = Infra{PID: pid, StartTime: started}
		}
	})
	return found
}

func isPauseBinary(name string) bool { return name == PauseBinaryName || name == BinaryName }

// StopPause kills the infra process, and with it every process left in its
// PID namespace. An infra process that is gone already is fine.
func StopPause(in Infra) error {
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
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("pod infra process %d still there 10s after SIGKILL", in.PID)
	}
}

// NamespacePath is the PID namespace containers of the pod join.
func (in Infra) NamespacePath() string { return fmt.Sprintf("/proc/%d/ns/pid", in.PID) }
