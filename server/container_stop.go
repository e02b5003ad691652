package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/internal/chans"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/validate"
	"github.com/minicri/minicri/store"
)

// containerRuntime is the OCI runtime's calls on a container's process
// (*oci.Runtime): start, signal, ask its state, delete it.
type containerRuntime interface {
	Start(ctx context.Context, id string) error
	State(ctx context.Context, id string) (oci.State, error)
	Kill(ctx context.Context, id string, sig syscall.Signal, all bool) error
	Delete(ctx context.Context, id string, force bool, cgroupsPath string) error
	CgroupEmptied(id, cgroupsPath string) bool
}

// killGrace bounds the waits for a monitor to finish with a container that
// is gone (container_monitor.go, container_create.go).
const killGrace = 10 * time.Second

// StopContainer sends the container's stop signal, then SIGKILL after the
// timeout. Stopping a container that is gone or already stopped succeeds:
// the kubelet retries.
func (s *Server) StopContainer(ctx context.Context, req *runtime.StopContainerRequest) (*runtime.StopContainerResponse, error) {
	if req.GetTimeout() < 0 {
		return nil, toStatus(validate.Invalidf("timeout", "must not be negative (%d)", req.GetTimeout()))
	}
	id, err := s.resolveContainer("container_id", req.GetContainerId())
	if errors.Is(err, store.ErrNotFound) {
		return &runtime.StopContainerResponse{}, nil
	}
	if err != nil {
		return nil, toStatus(err)
	}
	_, unlock := s.lockCtr(id)
	defer unlock()
	if err := s.stopContainer(ctx, id, time.Duration(req.GetTimeout())*time.Second); err != nil {
		return nil, toStatus(fmt.Errorf("stop container %s: %w", id, err))
	}
	return &runtime.StopContainerResponse{}, nil
}

// killContainer stops a container at once; the caller holds the sandbox's lock.
func (s *Server) killContainer(ctx context.Context, id string) error {
	_, unlock := s.lockCtr(id)
	defer unlock()
	return s.stopContainer(ctx, id, 0)
}

// stopContainer signals the container and waits for its monitor to record
// the exit. The caller holds the container's lock.
func (s *Server) stopContainer(ctx context.Context, id string, timeout time.Duration) error {
	rec, err := s.containers.Get(id)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if rec.State != lifecycle.StateCreated && rec.State != lifecycle.StateRunning {
		return nil
	}
	rt, err := s.runtimes.Get(rec.Handler)
	if err != nil {
		return err
	}
	exited := s.ctr(id).exited
	if timeout > 0 {
		sig, err := parseSignal(rec.StopSignal)
		if err != nil {
			sig = syscall.SIGTERM
		}
		if err := rt.Kill(ctx, id, sig, false); err != nil && !errors.Is(err, oci.ErrNotFound) {
			s.log.WithField("container", id).WithError(err).Warn("stop signal not delivered; killing")
		}
		lifecycle.CrashPoint("container-stop-after-signal")
		if waitClosed(ctx, exited, timeout) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting %s for the exit after the stop signal: %w", timeout, err)
		}
	}
	// --all: a process the container's init left behind would keep its
	// cgroup, and its pipes, alive.
	if err := rt.Kill(ctx, id, syscall.SIGKILL, true); err != nil && !errors.Is(err, oci.ErrNotFound) {
		// Its processes may all have ended before the kill (with its pod's
		// PID namespace, say) and their cgroup gone with them: there is
		// nothing left to kill, only the exit to see recorded.
		if !rt.CgroupEmptied(id, rec.CgroupsPath) {
			return fmt.Errorf("kill: %w", err)
		}
		s.log.WithField("container", id).WithError(err).Debug("kill found no process left in the container's cgroup")
	}
	return s.waitReaped(ctx, id, exited)
}

// waitReaped waits for the exit of a container sent SIGKILL for as long as
// ctx allows, and logs once an exit that took longer than Hooks.SlowReap,
// with how long it took. Only the caller's deadline ends the wait, as
// DeadlineExceeded, as containerd's does: on a loaded node the kernel can
// take that long to reap a process, the container is then still being
// reaped, and the kubelet's next StopContainer waits again.
func (s *Server) waitReaped(ctx context.Context, id string, exited <-chan struct{}) error {
	start := time.Now()
	if waitClosed(ctx, exited, s.hooks.slowReap()) {
		return nil
	}
	select {
	case <-exited:
		s.log.WithField("container", id).WithField("waited", time.Since(start).Round(time.Millisecond).String()).
			Warn("container exited long after SIGKILL: the node is slow to reap")
		return nil
	case <-ctx.Done():
		return fmt.Errorf("container not reaped %s after SIGKILL: %w", time.Since(start).Round(time.Millisecond), ctx.Err())
	}
}

// waitClosed is chans.WaitClosed: ch closed before the timeout or ctx ended.
func waitClosed(ctx context.Context, ch <-chan struct{}, timeout time.Duration) bool {
	return chans.WaitClosed(ctx, ch, timeout)
}

// The real-time signals as glibc numbers them, which is how images (systemd's
// "SIGRTMIN+3") and the CRI's SIGRTMINPLUS3 mean them: glibc keeps 32 and 33.
const (
	sigRTMin = 34
	sigRTMax = 64
)

// signalAliases are names the CRI's Signal enum uses that x/sys does not know.
var signalAliases = map[string]string{"SIGIOT": "SIGABRT", "SIGCLD": "SIGCHLD", "SIGPOLL": "SIGIO"}

// parseSignal reads "SIGTERM", "TERM", "15", and the real-time forms
// "SIGRTMIN+3", "SIGRTMINPLUS3", "SIGRTMAX-2" and "SIGRTMAXMINUS2".
func parseSignal(name string) (syscall.Signal, error) {
	var n int
	if _, err := fmt.Sscanf(name, "%d", &n); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	upper := strings.ToUpper(name)
	if !strings.HasPrefix(upper, "SIG") {
		upper = "SIG" + upper
	}
	if alias, ok := signalAliases[upper]; ok {
		upper = alias
	}
	if sig, ok := realtimeSignal(upper); ok {
		return sig, nil
	}
	if sig := unix.SignalNum(upper); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q", name)
}

func realtimeSignal(name string) (syscall.Signal, bool) {
	for _, f := range []struct {
		prefix      string
		base, delta int
	}{
		{"SIGRTMINPLUS", sigRTMin, 1}, {"SIGRTMIN+", sigRTMin, 1},
		{"SIGRTMAXMINUS", sigRTMax, -1}, {"SIGRTMAX-", sigRTMax, -1},
	} {
		rest, ok := strings.CutPrefix(name, f.prefix)
		if !ok {
			continue
		}
		off, err := strconv.Atoi(rest)
		sig := f.base + f.delta*off
		if err != nil || off < 0 || sig < sigRTMin || sig > sigRTMax {
			return 0, false
		}
		return syscall.Signal(sig), true
	}
	switch name {
	case "SIGRTMIN":
		return sigRTMin, true
	case "SIGRTMAX":
		return sigRTMax, true
	}
	return 0, false
}
