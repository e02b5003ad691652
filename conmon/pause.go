package conmon

import (
	"context"
	"encoding/json"
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

	"github.com/minicri/minicri/internal/atomicfile"
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
// podDir is the pod's own directory, which the daemon made: the process is
// recorded there (InfraRecordName) before it may run (startPause), and
// found again only from that record, never by its command line, which a
// pod or a host user can forge (docs/security.md). podDir also labels the
// process for ps, nothing more.
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
//
// Before it does anything it waits on a second pipe, its fd pauseGoFD,
// for one byte, which the daemon writes only once the process (pid and
// start time) is recorded in podDir: a daemon killed before that closes
// the pipe with its death, and the process reads EOF and exits. So no
// infra process runs that its pod dir does not name.
func startPause(binary, podDir string, opts PauseOptions, attr *syscall.SysProcAttr) (Infra, error) {
	path, err := pauseBinary(binary)
	if err != nil {
		return Infra{}, err
	}
	sealed, err := sealedPause(path)
	if err != nil {
		return Infra{}, fmt.Errorf("start pod infra process: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return Infra{}, fmt.Errorf("start pod infra process: %w", err)
	}
	defer r.Close()
	goR, goW, err := os.Pipe()
	if err != nil {
		w.Close()
		return Infra{}, fmt.Errorf("start pod infra process: %w", err)
	}
	defer goW.Close()
	// argv[0] names the program, for ps; the kernel runs the sealed copy
	// (pause_sealed.go).
	cmd := &exec.Cmd{
		Path:        fmt.Sprintf("/proc/self/fd/%d", pauseExecFD),
		Args:        []string{PauseBinaryName, "pause", pauseLabel, podDir},
		Dir:         "/",
		Env:         opts.env(),
		Stderr:      w,
		ExtraFiles:  []*os.File{w, sealed, goR}, // fds 3, pauseExecFD, pauseGoFD
		SysProcAttr: attr,
	}
	err = cmd.Start()
	w.Close()
	goR.Close()
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
		err = recordInfra(podDir, in)
	}
	if err == nil {
		// A process that ended instead of waiting (EPIPE here) says why on
		// its pipe: that is the error to report.
		goErr := letRun(goW)
		if err = awaitConfined(r, in); err == nil {
			err = goErr
		}
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

// pauseGoFD is the infra process's end of the pipe it waits on before it
// does anything (cmd/minicri-pause, GO_FD).
const pauseGoFD = 5

// letRun writes the one byte a recorded infra process waits for.
func letRun(goW *os.File) error {
	if _, err := goW.Write([]byte{1}); err != nil {
		return fmt.Errorf("let it run once recorded: %w", err)
	}
	return goW.Close()
}

// InfraRecordName is the file in a pod dir that names the infra process
// started for it: written by the daemon, in the daemon's own 0700
// directory, before the process may run.
const InfraRecordName = "infra.json"

// recordInfra names the infra process in its pod dir. Not fsynced: the
// process does not outlive a reboot either (the run dir is a tmpfs).
func recordInfra(podDir string, in Infra) error {
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	if err := atomicfile.Replace(filepath.Join(podDir, InfraRecordName), data, 0o600); err != nil {
		return fmt.Errorf("record it in the pod dir: %w", err)
	}
	return nil
}

// RecordedInfra is the infra process last started for podDir, as
// recorded there; the zero Infra when none was. It may have ended, and its
// pid been reused: Alive(PID, StartTime) tells.
func RecordedInfra(podDir string) (Infra, error) {
	data, err := os.ReadFile(filepath.Join(podDir, InfraRecordName))
	if errors.Is(err, os.ErrNotExist) {
		return Infra{}, nil
	}
	if err != nil {
		return Infra{}, fmt.Errorf("read the pod's infra record: %w", err)
	}
	var in Infra
	if err := json.Unmarshal(data, &in); err != nil {
		return Infra{}, fmt.Errorf("read the pod's infra record %s: %w", filepath.Join(podDir, InfraRecordName), err)
	}
	return in, nil
}

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

// pauseLabel precedes the pod dir on an infra process's command line, a
// label for operators only.
const pauseLabel = "--pod"

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
