// Package streaming serves exec, attach and port-forward to the kubelet: an
// HTTP server that hands out single-use URLs (ExecURL, AttachURL,
// PortForwardURL) and, when the kubelet connects to one, speaks the stream
// protocols of k8s.io/cri-streaming (SPDY, and WebSocket up to
// v5.channel.k8s.io) and calls a Runtime with plain streams.
//
// The package knows HTTP, tokens and the stream protocols; it does not know
// containers, runc or the CRI: the server package implements Runtime.
package streaming

import (
	"context"
	"fmt"
	"io"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// Runtime runs what a client connected for. Every call gets a context that
// ends when the client disconnects or the server closes: the runtime must
// then stop what it started.
type Runtime interface {
	// Exec runs cmd in the container and wires it to the streams. A
	// non-zero exit is an *ExitError.
	Exec(ctx context.Context, containerID string, cmd []string, streams Streams) error
	// Attach wires the container's own stdio to the streams until the
	// container's output ends or ctx does.
	Attach(ctx context.Context, containerID string, streams Streams) error
	// PortForward connects stream to port inside the sandbox's network
	// namespace until either side ends.
	PortForward(ctx context.Context, sandboxID string, port int32, stream io.ReadWriteCloser) error
}

// Streams are a client's streams; those it did not ask for are nil.
type Streams struct {
	Stdin          io.Reader
	Stdout, Stderr io.WriteCloser
	TTY            bool
	// Resize carries the client's terminal size changes while TTY; it is
	// closed when the client's resize stream ends.
	Resize <-chan TerminalSize
}

// TerminalSize is a client terminal's size in characters.
type TerminalSize = remotecommand.TerminalSize

// ExitError is the exit of a command that ended with a non-zero code: the
// client shows it as "command terminated with non-zero exit code".
type ExitError struct {
	Code int
}

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// String, Exited and ExitStatus make an ExitError what the stream
// protocol's server reports as an exit code (k8s.io/utils/exec.ExitError).
func (e *ExitError) String() string  { return e.Error() }
func (e *ExitError) Exited() bool    { return true }
func (e *ExitError) ExitStatus() int { return e.Code }

// ExecRequest is what an exec URL stands for.
type ExecRequest struct {
	ContainerID                string
	Cmd                        []string
	Stdin, Stdout, Stderr, TTY bool
}

// AttachRequest is what an attach URL stands for.
type AttachRequest struct {
	ContainerID                string
	Stdin, Stdout, Stderr, TTY bool
}

// PortForwardRequest is what a port-forward URL stands for. Ports may be
// empty: the client then names its ports when it connects.
type PortForwardRequest struct {
	SandboxID string
	Ports     []int32
}
