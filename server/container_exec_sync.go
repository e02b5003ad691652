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
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/metrics"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/validate"
)

// ExecSync runs a command in a container and answers with its output and
// exit code: the kubelet's exec probes, on every node, every few seconds.
// A timeout kills the command and everything it started and answers
// DeadlineExceeded, which the kubelet reads as a timed-out probe.
func (s *Server) ExecSync(ctx context.Context, req *runtime.ExecSyncRequest) (*runtime.ExecSyncResponse, error) {
	if len(req.GetCmd()) == 0 {
		return nil, toStatus(validate.Invalidf("cmd", "must not be empty"))
	}
	if req.GetTimeout() < 0 {
		return nil, toStatus(validate.Invalidf("timeout", "must not be negative (%d)", req.GetTimeout()))
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
	limit := min(s.cfg.Runtime.ExecSyncMaxOutput, config.ExecSyncOutputLimit)
	stdout, stderr := &cappedOutput{limit: limit}, &cappedOutput{limit: limit}
	start := time.Now()
	code, err := t.rt.Exec(ctx, t.rec.ID, t.rec.Bundle, oci.ExecProcessSpec(t.base, req.GetCmd(), false),
		oci.ExecIO{Stdout: stdout, Stderr: stderr})
	s.metrics.ObserveExecSync(execResult(code, err, timeout > 0), time.Since(start))
	if errors.Is(err, context.DeadlineExceeded) && timeout > 0 {
		return nil, toStatus(markf(context.DeadlineExceeded, "command %q in container %s timed out after %s",
			strings.Join(req.GetCmd(), " "), t.rec.ID, timeout))
	}
	if err != nil {
		return nil, toStatus(fmt.Errorf("exec in container %s: %w", t.rec.ID, err))
	}
	// The answer must fit the kubelet's 16 MiB message limit whole, or it
	// gets none of it. (containerd caps each stream at 16 MiB apart, so its
	// answer to output that big fails instead.)
	fitOutputs(stdout, stderr, config.ExecSyncOutputLimit)
	s.logTruncated(t.rec.ID, req.GetCmd(), map[string]*cappedOutput{"stdout": stdout, "stderr": stderr})
	return &runtime.ExecSyncResponse{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: int32(code)}, nil
}

// execResult is how an exec ended, for its metrics.
func execResult(code int, err error, timed bool) metrics.ExecResult {
	switch {
	case timed && errors.Is(err, context.DeadlineExceeded):
		return metrics.ExecTimeout
	case err != nil:
		return metrics.ExecError
	}
	return metrics.ExitResult(code)
}

func (s *Server) logTruncated(id string, cmd []string, outputs map[string]*cappedOutput) {
	for name, o := range outputs {
		if dropped := o.Dropped(); dropped > 0 {
			s.log.WithFields(logrus.Fields{"container": id, "cmd": strings.Join(cmd, " "), "stream": name,
				"kept": o.Len(), "dropped": dropped}).Warn("exec sync output over runtime.exec_sync_max_output: truncated")
		}
	}
}

// fitOutputs cuts the two outputs to total bytes together, when they are
// longer: each keeps at least half, and one shorter than half leaves the rest
// to the other. Which stream wrote first does not matter, so a probe's answer
// is the same every time.
func fitOutputs(stdout, stderr *cappedOutput, total int) {
	out, errLen := stdout.Len(), stderr.Len()
	if out+errLen <= total {
		return
	}
	half := total / 2
	switch {
	case out <= half:
		stderr.truncate(total - out)
	case errLen <= half:
		stdout.truncate(total - errLen)
	default:
		stdout.truncate(half)
		stderr.truncate(total - half)
	}
}

// cappedOutput keeps the first limit bytes written to it and counts the
// rest, so that a chatty probe cannot grow the daemon.
type cappedOutput struct {
	limit   int
	mu      sync.Mutex
	buf     bytes.Buffer
	dropped int64
}

func (c *cappedOutput) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := max(c.limit-c.buf.Len(), 0)
	keep := min(room, len(p))
	c.buf.Write(p[:keep])
	c.dropped += int64(len(p) - keep)
	return len(p), nil
}

// truncate keeps the first n bytes and counts the rest as dropped.
func (c *cappedOutput) truncate(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n < c.buf.Len() {
		c.dropped += int64(c.buf.Len() - n)
		c.buf.Truncate(n)
	}
}

func (c *cappedOutput) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.buf.Bytes())
}

func (c *cappedOutput) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Len()
}

func (c *cappedOutput) Dropped() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}
