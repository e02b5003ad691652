package server

import (
	"context"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/server/podsandbox"
	"github.com/minicri/minicri/server/validate"
)

// processScopes moves minicri's own long-lived processes (a pod's infra
// process, through podsandbox.Deps.ToScope, and the monitors) out of the
// daemon's cgroup into transient systemd scopes (*oci.SystemdScopes), under
// the systemd cgroup driver only.
type processScopes interface {
	MoveToScope(ctx context.Context, pid int, unit, slice, description string) error
	StopScope(ctx context.Context, unit string) error
}

// scopeTimeout bounds systemd's answer; a slow one leaves the process where
// it is, with a warning.
const scopeTimeout = 30 * time.Second

// monitorSlice holds the monitors' scopes: a monitor may serve the
// containers of several pods (runtime.monitor_share), so it is no one pod's.
// Out of minicri.service all the same: a `systemctl kill minicri` or the
// unit's limits must not reach it.
const monitorSlice = "system.slice"

// leaveDaemonCgroup moves a process of minicri's own into a scope of its
// own in slice. Without the systemd driver it does nothing; a failure is
// logged, and the process stays in the daemon's cgroup: it runs all the
// same.
func (s *Server) leaveDaemonCgroup(ctx context.Context, pid int, started uint64, unit, slice, what string) {
	if s.scopes == nil || pid <= 0 || !s.hooks.processAlive(pid, started) { // never a reused pid
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), scopeTimeout)
	defer cancel()
	if err := s.scopes.MoveToScope(ctx, pid, unit, slice, "minicri "+what); err != nil {
		s.log.WithError(err).WithField("pid", pid).Warnf("%s stays in the daemon's cgroup", what)
	}
}

// validateCgroupParent refuses, under the systemd driver, a cgroup parent
// that is no slice (or no slice's path) at RunPodSandbox, naming the field,
// instead of at the first container.
func (s *Server) validateCgroupParent(cfg *runtime.PodSandboxConfig) error {
	if s.cfg.CgroupDriver != config.SystemdDriver {
		return nil
	}
	if _, err := podsandbox.Slice(cfg); err != nil {
		return validate.Invalidf("config.linux.cgroup_parent", "%v", err)
	}
	return nil
}

// monitorScope is the scope of a monitor, named after the first container
// it served.
func monitorScope(firstContainerID string) string {
	return "minicri-conmon-" + firstContainerID + ".scope"
}

// scopeGone stops the scope of a process of minicri's own once that
// process has ended (oci.SystemdScopes.StopScope says why systemd may not
// see it go). Without the systemd driver it does nothing; a failure is
// logged: the scope is empty, and the kubelet's removal of the pod's slice
// stops an infra process's scope all the same.
func (s *Server) scopeGone(ctx context.Context, unit, what string) {
	if s.scopes == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), scopeTimeout)
	defer cancel()
	if err := s.scopes.StopScope(ctx, unit); err != nil {
		s.log.WithError(err).Warnf("the scope of the %s stays", what)
	}
}
