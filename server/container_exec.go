package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/internal/chans"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/validate"
	"github.com/minicri/minicri/streaming"
)

// processExecer runs a further process in a container (*oci.Runtime).
type processExecer interface {
	Exec(ctx context.Context, id, stateDir string, proc *specs.Process, o oci.ExecIO) (int, error)
}

// errNotRunning refuses exec, attach and the like on a container whose
// process is not running: FailedPrecondition.
var errNotRunning = errors.New("container is not running")

// execExitGrace is how long a streamed exec may go on delivering output once
// its container exited, before it is ended for good: a client that stopped
// reading must not keep anything of the container alive.
const execExitGrace = time.Second

// execOutputGrace is how long a streamed exec goes on delivering output once
// its own process exited: what it wrote is in the pipes by then, and a child
// that left its session to run on (`setsid daemon &`) must not hold the
// exec, the client and the daemon's pipes until it ends. ExecSync waits for
// the end of output instead, bounded by its timeout, as containerd does.
const execOutputGrace = time.Second

// Exec validates the request and answers with a single-use URL on the
// streaming server; the command runs when the kubelet connects to it.
func (s *Server) Exec(ctx context.Context, req *runtime.ExecRequest) (*runtime.ExecResponse, error) {
	if len(req.GetCmd()) == 0 {
		return nil, toStatus(validate.Invalidf("cmd", "must not be empty"))
	}
	rec, err := s.streamTarget(req)
	if err != nil {
		return nil, toStatus(err)
	}
	url, err := s.streams.ExecURL(streaming.ExecRequest{
		ContainerID: rec.ID, Cmd: req.GetCmd(),
		Stdin: req.GetStdin(), Stdout: req.GetStdout(), Stderr: req.GetStderr(), TTY: req.GetTty(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &runtime.ExecResponse{Url: url}, nil
}

// streamRequest is what an exec and an attach request have in common.
type streamRequest interface {
	GetContainerId() string
	GetStdin() bool
	GetStdout() bool
	GetStderr() bool
	GetTty() bool
}

// streamTarget checks the streams an exec or attach asks for and returns
// the running container it names.
func (s *Server) streamTarget(req streamRequest) (lifecycle.ContainerRecord, error) {
	if err := validateStreams(req.GetStdin(), req.GetStdout(), req.GetStderr(), req.GetTty()); err != nil {
		return lifecycle.ContainerRecord{}, err
	}
	return s.runningContainer(req.GetContainerId())
}

// validateStreams checks the streams of an exec or attach request.
func validateStreams(stdin, stdout, stderr, tty bool) error {
	if !stdin && !stdout && !stderr {
		return validate.Invalidf("stdin", "one of stdin, stdout and stderr must be set")
	}
	if tty && stderr {
		return validate.Invalidf("stderr", "must not be set with tty: a terminal has a single output stream")
	}
	return nil
}

// runningContainer returns the record of a running container.
func (s *Server) runningContainer(idOrPrefix string) (lifecycle.ContainerRecord, error) {
	rec, err := s.lookupContainer(idOrPrefix)
	if err != nil {
		return lifecycle.ContainerRecord{}, fmt.Errorf("container %.80q: %w", idOrPrefix, err)
	}
	if rec.State != lifecycle.StateRunning {
		return lifecycle.ContainerRecord{}, fmt.Errorf("%w: container %s is %s", errNotRunning, rec.ID, rec.State)
	}
	return rec, nil
}

// execTarget is what an exec needs of its container.
type execTarget struct {
	rec  lifecycle.ContainerRecord
	rt   processExecer
	base *specs.Process // the container's own process, shared: do not change
}

func (s *Server) execTarget(idOrPrefix string) (execTarget, error) {
	rec, err := s.runningContainer(idOrPrefix)
	if err != nil {
		return execTarget{}, err
	}
	rt, err := s.runtimes.Get(rec.Handler)
	if err != nil {
		return execTarget{}, err
	}
	base, err := s.ctr(rec.ID).processSpec(rec)
	if err != nil {
		return execTarget{}, err
	}
	return execTarget{rec: rec, rt: rt, base: base}, nil
}

// processSpec is the container's own process, read from its bundle's
// config.json at the first exec and kept in its object (see container).
func (c *container) processSpec(rec lifecycle.ContainerRecord) (*specs.Process, error) {
	c.mu.Lock()
	process := c.process
	c.mu.Unlock()
	if process != nil {
		return process, nil
	}
	spec, err := oci.ReadSpec(rec.Bundle)
	if err != nil {
		return nil, fmt.Errorf("spec of container %s: %w", rec.ID, err)
	}
	if spec.Process == nil {
		return nil, fmt.Errorf("spec of container %s has no process", rec.ID)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.process == nil {
		c.process = spec.Process
	}
	return c.process, nil
}

// streamRuntime is what the streaming server runs when the kubelet connects
// to one of its URLs.
type streamRuntime struct{ s *Server }

// Exec runs a command in a container for a streaming client. The exec ends
// with the client, and shortly after its container: a client that stopped
// reading does not hold back StopContainer or RemoveContainer.
func (r streamRuntime) Exec(ctx context.Context, containerID string, cmd []string, st streaming.Streams) error {
	t, err := r.s.execTarget(containerID)
	if err != nil {
		return err
	}
	exited := r.s.ctr(t.rec.ID).exited
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go endAfterExit(ctx, cancel, exited)
	resize, stopResize := ociResizes(st.Resize)
	defer stopResize()
	start := time.Now()
	code, err := t.rt.Exec(ctx, t.rec.ID, t.rec.Bundle, oci.ExecProcessSpec(t.base, cmd, st.TTY), oci.ExecIO{
		// A nil WriteCloser stays a nil Writer: the process gets /dev/null.
		Stdin: st.Stdin, Stdout: st.Stdout, Stderr: st.Stderr, Resize: resize, Stream: true,
		OutputGrace: execOutputGrace,
	})
	r.s.metrics.ObserveExecStream(execResult(code, err, false), time.Since(start))
	if err != nil {
		return fmt.Errorf("exec in container %s: %w", t.rec.ID, err)
	}
	if code != 0 {
		return &streaming.ExitError{Code: code}
	}
	return nil
}

// endAfterExit cancels an exec execExitGrace after its container exited.
func endAfterExit(ctx context.Context, cancel context.CancelFunc, exited <-chan struct{}) {
	select {
	case <-ctx.Done():
		return
	case <-exited:
	}
	timer := time.NewTimer(execExitGrace)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
		cancel()
	}
}

// forwardResizes passes a client's terminal sizes on, converted, until stop
// is called or the client's stream ends: the goroutine never outlives the
// exec or attach it serves, started or not.
func forwardResizes[T any](in <-chan streaming.TerminalSize, convert func(streaming.TerminalSize) T) (<-chan T, func()) {
	if in == nil {
		return nil, func() {}
	}
	out := make(chan T)
	done := make(chan struct{})
	go func() {
		defer close(out)
		chans.Each(in, done, func(size streaming.TerminalSize) bool {
			select {
			case out <- convert(size):
				return true
			case <-done:
				return false
			}
		})
	}()
	return out, func() { close(done) }
}

func ociResizes(in <-chan streaming.TerminalSize) (<-chan oci.TerminalSize, func()) {
	return forwardResizes(in, func(s streaming.TerminalSize) oci.TerminalSize {
		return oci.TerminalSize{Width: s.Width, Height: s.Height}
	})
}
