package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// RuntimeLogFile is the name of the runtime's log in a bundle, written by
// Create.
const RuntimeLogFile = "runtime.log"

// CreateOptions are the options of `runc create`.
type CreateOptions struct {
	// PidFile receives the container init's host pid.
	PidFile string
	// ConsoleSocket receives the pty master of a terminal container.
	ConsoleSocket string
	// NoPivot uses MS_MOVE instead of pivot_root, for a rootfs on a ramdisk.
	NoPivot bool
	// LogPath is the runtime's log; "" means BUNDLE/runtime.log. Errors are
	// read from it, because the runtime's stderr is the container's.
	LogPath string
	// Stdin, Stdout and Stderr become the container's stdio; nil is /dev/null.
	// They must be files: a pipe made by os/exec would keep Create waiting for
	// the container to exit.
	Stdin, Stdout, Stderr *os.File
}

// CreateArgs returns the full command line of `create`, binary first, for a
// monitor process that runs the create itself.
func (r *Runtime) CreateArgs(id, bundle string, o CreateOptions) ([]string, error) {
	bin, err := r.Binary()
	if err != nil {
		return nil, err
	}
	args := append([]string{bin}, r.globalArgs(createLogPath(bundle, o))...)
	return append(args, createSubcommand(id, bundle, o)...), nil
}

func createLogPath(bundle string, o CreateOptions) string {
	if o.LogPath != "" {
		return o.LogPath
	}
	return filepath.Join(bundle, RuntimeLogFile)
}

func createSubcommand(id, bundle string, o CreateOptions) []string {
	args := []string{"create", "--bundle", bundle}
	if o.PidFile != "" {
		args = append(args, "--pid-file", o.PidFile)
	}
	if o.ConsoleSocket != "" {
		args = append(args, "--console-socket", o.ConsoleSocket)
	}
	if o.NoPivot {
		args = append(args, "--no-pivot")
	}
	return append(args, id)
}

// Create creates the container from bundle/config.json without starting its
// process. The created init is the child of no one here: its reaper must be a
// subreaper (the monitor) or init. A context that ends mid-create kills the
// runtime and may leave a half-created container: Delete(force) it.
func (r *Runtime) Create(ctx context.Context, id, bundle string, o CreateOptions) error {
	logPath := createLogPath(bundle, o)
	// The log only holds this create's messages; runc appends otherwise.
	if err := os.Truncate(logPath, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reset runtime log %s: %w", logPath, err)
	}
	cmd, err := r.command(ctx, logPath, createSubcommand(id, bundle, o)...)
	if err != nil {
		return err
	}
	setStdio(cmd, o.Stdin, o.Stdout, o.Stderr)
	if err := cmd.Run(); err != nil {
		return r.failure(ctx, "create", id, logFileMessage(logPath), err)
	}
	return nil
}

// setStdio leaves a nil file unset, so that os/exec gives /dev/null: a typed
// nil in the interface would not be.
func setStdio(cmd *exec.Cmd, stdin, stdout, stderr *os.File) {
	if stdin != nil {
		cmd.Stdin = stdin
	}
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if stderr != nil {
		cmd.Stderr = stderr
	}
}

// ExecOptions are the options of `runc exec --process`.
type ExecOptions struct {
	// ProcessPath is the process.json to run (see ReadSpec for the base).
	ProcessPath string
	// ConsoleSocket receives the pty master when the process has a terminal.
	ConsoleSocket string
	// PidFile receives the process's host pid. With it, a context that ends
	// kills the process in the container too, not only the runtime.
	PidFile string
	// Detach returns once the process runs, instead of waiting for it.
	Detach bool
	// LogPath, when set, receives the runtime's own log (JSON), so that its
	// messages can be told apart from the process's stderr (see LogMessage).
	LogPath string
	// Stdio of the process; nil is /dev/null. With os.Pipe ends, closing the
	// writer really closes the process's stdin.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// ExecProcess starts `exec` and returns the running command; the caller
// waits for it, and its exit code is the process's. A context that ends kills
// the runtime and, when PidFile is set, the process in the container.
func (r *Runtime) ExecProcess(ctx context.Context, id string, o ExecOptions) (*exec.Cmd, error) {
	if o.ProcessPath == "" {
		return nil, fmt.Errorf("%w: exec in %s needs a process file", ErrInvalid, id)
	}
	args := []string{"exec", "--process", o.ProcessPath}
	if o.ConsoleSocket != "" {
		args = append(args, "--console-socket", o.ConsoleSocket)
	}
	if o.PidFile != "" {
		args = append(args, "--pid-file", o.PidFile)
	}
	if o.Detach {
		args = append(args, "--detach")
	}
	cmd, err := r.command(ctx, o.LogPath, append(args, id)...)
	if err != nil {
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, o.Stdout, o.Stderr
	cmd.Cancel = func() error {
		// The runtime cannot forward SIGKILL to the process it runs.
		if o.PidFile != "" {
			if pid, err := readPidFile(o.PidFile); err == nil {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		return cmd.Process.Kill()
	}
	if err := cmd.Start(); err != nil {
		return nil, r.failure(ctx, "exec", id, "", err)
	}
	return cmd, nil
}

// LogMessage returns the last error a runtime wrote to a --log file (see
// ExecOptions.LogPath), "" when there is none.
func LogMessage(logPath string) string {
	return logFileMessage(logPath)
}
