package conmon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/minicri/minicri/conmon/wire"
	"github.com/minicri/minicri/oci/runcflags"
)

// cleanupTimeout bounds the undoing of a create that failed or timed out.
const cleanupTimeout = 10 * time.Second

// Create starts the container's monitor, which runs the runtime's create, and
// returns once the container exists and waits for the runtime's start. The
// monitor is detached: its own session and process group, stdio on
// /dev/null, nothing of the daemon's open, so it and the container outlive
// the daemon. On any error, runc's included (errors.Is(err,
// ErrCreateFailed)), nothing is left: no monitor, no runtime state, no
// socket. A context without a deadline gets DefaultCreateTimeout.
func Create(ctx context.Context, o Options) (Created, error) {
	cfg, err := o.config()
	if err != nil {
		return Created{}, fmt.Errorf("monitor options: %w", err)
	}
	bin, err := o.binary()
	if err != nil {
		return Created{}, fmt.Errorf("find monitor: %w", err)
	}
	ctx, cancel := createContext(ctx)
	defer cancel()
	syncR, syncW, err := os.Pipe()
	if err != nil {
		return Created{}, fmt.Errorf("monitor sync pipe: %w", err)
	}
	defer syncR.Close()
	cmd := monitorCommand(bin, cfg, syncW)
	err = cmd.Start()
	syncW.Close() // the monitor has its copy; ours would hide its end of file
	if err != nil {
		return Created{}, fmt.Errorf("start monitor: %w", err)
	}
	pid := cmd.Process.Pid
	// Until reaped, the child's /proc entry stays, even as a zombie.
	start, err := startTime(pid)
	reaped := reapChild(pid)
	cmd.Process.Release()
	if err != nil {
		abandon(pid, cfg, reaped, false)
		return Created{}, fmt.Errorf("monitor start time: %w", err)
	}
	created, err := readCreated(ctx, syncR, pid)
	if err != nil {
		abandon(pid, cfg, reaped, errors.Is(err, ErrCreateFailed))
		return Created{}, fmt.Errorf("create container %s: %w", cfg.ID, err)
	}
	created.MonitorStartTime = start
	return created, nil
}

// createContext gives a create DefaultCreateTimeout when ctx has no
// deadline: a runtime that hangs must not hang the daemon's call for ever.
func createContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultCreateTimeout)
}

// monitorCommand detaches the monitor from the daemon: a session of its own
// (no terminal, no signal sent to the daemon's process group reaches it),
// stdio on /dev/null, and an environment of its own. The daemon's
// environment stays out on purpose: runc acts on NOTIFY_SOCKET, for one.
func monitorCommand(bin string, cfg wire.Config, syncW *os.File) *exec.Cmd {
	cmd := exec.Command(bin, cfg.Args()...)
	cmd.ExtraFiles = []*os.File{syncW} // fd 3, wire.SyncFD
	cmd.Dir = "/"
	cmd.Env = monitorEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd
}

func monitorEnv() []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	return []string{
		"PATH=" + path,
		// One P: the monitor runs one goroutine; more Ps are only more
		// per-P caches and more threads. GOMAXPROCS must be in the
		// environment: the runtime sizes itself before main runs.
		"GOMAXPROCS=1",
		// No heap profile sampling: nobody can fetch a monitor's, and
		// each sample touched the runtime's table of stacks. Set before
		// main, as GOMAXPROCS, so that no allocation is sampled.
		"GODEBUG=memprofilerate=0",
	}
}

// readCreated reads the monitor's report from the sync pipe.
func readCreated(ctx context.Context, syncR *os.File, pid int) (Created, error) {
	// A deadline in the past interrupts the read when ctx ends, by its
	// deadline or by a cancel.
	stop := context.AfterFunc(ctx, func() { syncR.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	msg, err := readSync(syncR)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return Created{}, fmt.Errorf("monitor did not report in time: %w", ctx.Err())
	}
	if err != nil {
		return Created{}, fmt.Errorf("read monitor report: %w", err)
	}
	if len(msg) == 0 {
		return Created{}, errors.New("monitor exited without a report")
	}
	containerPID, monitorPID, err := wire.ParseSync(msg)
	if err != nil {
		return Created{}, err
	}
	if monitorPID != pid {
		return Created{}, fmt.Errorf("monitor reports pid %d, started as %d", monitorPID, pid)
	}
	return Created{MonitorPID: pid, ContainerPID: containerPID}, nil
}

// readSync reads until the end of file, or until a whole "created" line is
// in: that report is complete, whoever else may still hold the pipe.
func readSync(r io.Reader) ([]byte, error) {
	var msg []byte
	buf := make([]byte, 4096)
	for len(msg) < 1<<16 {
		n, err := r.Read(buf)
		msg = append(msg, buf[:n]...)
		if bytes.HasPrefix(msg, []byte("created ")) && bytes.IndexByte(msg, '\n') >= 0 {
			return msg, nil
		}
		if err == io.EOF {
			return msg, nil
		}
		if err != nil {
			return msg, err
		}
	}
	return msg, nil
}

// abandon undoes a create that failed. A monitor that reported its failure
// has cleaned up after itself and exits. Any other is killed with its
// process group, which holds the runtime's create too, and the runtime's
// state and the monitor's files are removed here.
func abandon(pid int, cfg wire.Config, reaped <-chan struct{}, reported bool) {
	if reported {
		select {
		case <-reaped:
			return
		case <-time.After(cleanupTimeout):
		}
	}
	syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-reaped:
	case <-time.After(cleanupTimeout):
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	args := append([]string{}, runtimeGlobalArgs(cfg)...)
	args = append(args, "delete", "--force", cfg.ID)
	exec.CommandContext(ctx, cfg.Runtime, args...).Run()
	for _, name := range []string{wire.AttachSocket, wire.ControlSocket, wire.ConsoleSocket, wire.PIDFile, wire.RuntimeLog, wire.CreatorFile, wire.CreatorFile + ".tmp"} {
		os.Remove(cfg.SocketDir + "/" + name)
	}
}

func runtimeGlobalArgs(cfg wire.Config) []string {
	return runcflags.Global{Root: cfg.RuntimeRoot, Extra: cfg.RuntimeArgs}.Args()
}
