package server

import (
	"context"
	"fmt"
	"io"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/streaming"
)

// monitorSockets are the calls on a running monitor's socket (conmon).
type monitorSockets interface {
	Attach(ctx context.Context, socketDir string, stdin io.Reader, stdout, stderr io.Writer, resize <-chan conmon.Size) error
	ReopenLog(ctx context.Context, socketDir string) error
}

// Attach validates the request and answers with a single-use URL that
// connects to the running container's own stdio.
func (s *Server) Attach(ctx context.Context, req *runtime.AttachRequest) (*runtime.AttachResponse, error) {
	rec, err := s.streamTarget(req)
	if err != nil {
		return nil, toStatus(err)
	}
	url, err := s.streams.AttachURL(streaming.AttachRequest{
		ContainerID: rec.ID, Stdin: req.GetStdin(), Stdout: req.GetStdout(), Stderr: req.GetStderr(), TTY: req.GetTty(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &runtime.AttachResponse{Url: url}, nil
}

// Attach connects a streaming client to the container's monitor: live
// output, stdin when the container was created with it, and window size
// changes for a tty container. It ends when the container's output does
// or the client goes.
func (r streamRuntime) Attach(ctx context.Context, containerID string, st streaming.Streams) error {
	rec, err := r.s.runningContainer(containerID)
	if err != nil {
		return err
	}
	cfg, err := rec.DecodeConfig()
	if err != nil {
		return err
	}
	var stdin io.Reader
	if cfg.GetStdin() {
		stdin = st.Stdin
	}
	var resize <-chan conmon.Size
	if cfg.GetTty() {
		var stop func()
		resize, stop = monitorResizes(st.Resize)
		defer stop()
	}
	// A nil WriteCloser stays a nil Writer: that output is not sent.
	if err := r.s.sockets.Attach(ctx, rec.Bundle, stdin, st.Stdout, st.Stderr, resize); err != nil && ctx.Err() == nil {
		return fmt.Errorf("attach to container %s: %w", rec.ID, err)
	}
	return nil
}

func monitorResizes(in <-chan streaming.TerminalSize) (<-chan conmon.Size, func()) {
	return forwardResizes(in, func(s streaming.TerminalSize) conmon.Size {
		return conmon.Size{Rows: s.Height, Cols: s.Width}
	})
}
