package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/oci"
)

// ExecSync runs a command in a container and answers with its output and
// exit code: the kubelet's exec probes, on every node, every few seconds.
// A timeout kills the command and everything it started and answers
// DeadlineExceeded, which the kubelet reads as a timed-out probe.
func (s *Server) ExecSync(ctx context.Context, req *runtime.ExecSyncRequest) (*runtime.ExecSyncResponse, error) {
	if len(req.GetCmd()) == 0 {
		return nil, toStatus(invalidf("cmd", "must not be empty"))
	}
	if req.GetTimeout() < 0 {
		return nil, toStatus(invalidf("timeout", "must not be negative (%d)", req.GetTimeout()))
	}
	t, err := s.execTarget(req.GetContainerId())
	if err != nil {
		return nil, toStatus(err)
	}
	timeout := time.Duration(req.GetTimeout()) * time.Second
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	// One budget for both streams: the answer must fit the kubelet's 16 MiB
	// message limit whole, or it gets none of it. (containerd caps each
	// stream at 16 MiB apart, so its answer to a big output fails instead.)
	budget := newOutputBudget(min(s.cfg.Runtime.ExecSyncMaxOutput, config.ExecSyncOutputLimit))
	stdout, stderr := budget.output(), budget.output()
	code, err := t.rt.Exec(ctx, t.rec.ID, t.rec.Bundle, oci.ExecProcessSpec(t.base, req.GetCmd(), false),
		oci.ExecIO{Stdout: stdout, Stderr: stderr})
	if errors.Is(err, context.DeadlineExceeded) && timeout > 0 {
		return nil, status.Errorf(codes.DeadlineExceeded, "command %q in container %s timed out after %s",
			strings.Join(req.GetCmd(), " "), t.rec.ID, timeout)
	}
	if err != nil {
		return nil, toStatus(fmt.Errorf("exec in container %s: %w", t.rec.ID, err))
	}
	s.logTruncated(t.rec.ID, req.GetCmd(), map[string]*cappedOutput{"stdout": stdout, "stderr": stderr})
	return &runtime.ExecSyncResponse{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: int32(code)}, nil
}

func (s *Server) logTruncated(id string, cmd []string, outputs map[string]*cappedOutput) {
	for name, o := range outputs {
		if dropped := o.Dropped(); dropped > 0 {
			s.log.WithFields(logrus.Fields{"container": id, "cmd": strings.Join(cmd, " "), "stream": name,
				"kept": o.Len(), "dropped": dropped}).Warn("exec sync output over runtime.exec_sync_max_output: truncated")
		}
	}
}

// outputBudget is the room left for an ExecSync's output, shared by its
// stdout and stderr, so that a chatty probe can neither grow the daemon nor
// make an answer too big to send.
type outputBudget struct {
	mu   sync.Mutex // guards left and every buffer drawing from it
	left int
}

func newOutputBudget(limit int) *outputBudget { return &outputBudget{left: limit} }

// output returns a writer that keeps what the budget still has room for.
func (b *outputBudget) output() *cappedOutput { return &cappedOutput{budget: b} }

// cappedOutput keeps the first bytes written to it while its budget lasts,
// and counts the rest.
type cappedOutput struct {
	budget  *outputBudget
	buf     bytes.Buffer
	dropped int64
}

func (c *cappedOutput) Write(p []byte) (int, error) {
	c.budget.mu.Lock()
	defer c.budget.mu.Unlock()
	keep := min(c.budget.left, len(p))
	c.budget.left -= keep
	c.buf.Write(p[:keep])
	c.dropped += int64(len(p) - keep)
	return len(p), nil
}

func (c *cappedOutput) Bytes() []byte {
	c.budget.mu.Lock()
	defer c.budget.mu.Unlock()
	return bytes.Clone(c.buf.Bytes())
}

func (c *cappedOutput) Len() int {
	c.budget.mu.Lock()
	defer c.budget.mu.Unlock()
	return c.buf.Len()
}

func (c *cappedOutput) Dropped() int64 {
	c.budget.mu.Lock()
	defer c.budget.mu.Unlock()
	return c.dropped
}
