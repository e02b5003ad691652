// Package podsandbox holds a pod's life below the CRI: making a sandbox
// (its record, pinned namespaces, /dev/shm, infra process, network and
// files), stopping it, removing it, and repairing at start what a crash
// left of one. The CRI handlers of server/ check a request, reserve its
// name and call the Controller; the pod's containers, the objects and
// their locks, and the telling of events and NRI plugins stay there, and
// reach the controller through Deps. It knows no gRPC: its errors are
// wrapped, and server/errors.go gives them their codes.
package podsandbox

import (
	"context"
	"path/filepath"

	"github.com/sirupsen/logrus"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/metrics"
	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// Records are the sandboxes' records (the server's store.Table, which
// keeps each with its object).
type Records interface {
	Get(id string) (lifecycle.SandboxRecord, error)
	List() []lifecycle.SandboxRecord
	// Stage writes without waiting for the disk; Put waits (store.Stage).
	Stage(id string, rec lifecycle.SandboxRecord) error
	Put(id string, rec lifecycle.SandboxRecord) error
	Observe(id string, fn func(*lifecycle.SandboxRecord) error) (lifecycle.SandboxRecord, error)
	// Delete drops the record and its object.
	Delete(id string) error
}

// Network attaches pods to the pod network and detaches them (*network.CNI).
type Network interface {
	Setup(ctx context.Context, pn network.PodNetwork) (network.Result, error)
	Teardown(ctx context.Context, pn network.PodNetwork) error
}

// Pins pins a pod's shared namespaces and mounts its /dev/shm: the parts
// of a sandbox that need root.
type Pins interface {
	Pin(dir string, kinds []network.NamespaceKind, hostname string) (network.Namespaces, error)
	Unpin(ns network.Namespaces) error
	MountShm(path string, size int) error
	UnmountShm(path string) error
}

// Infra runs the infra process of a pod that shares its PID namespace
// (conmon).
type Infra interface {
	StartPause(binary, podDir string, opts conmon.PauseOptions) (conmon.Infra, error)
	StopPause(ctx context.Context, in conmon.Infra) error
}

// Containers are a pod's containers, which the server keeps: what the
// pod's stop, removal and repair do to them. Each call acts on all the
// pod's containers at once, so that a pod takes the slowest of them rather
// than their sum.
type Containers interface {
	// InPodPIDNamespace are the exits of the pod's created or running
	// containers that joined its infra process's PID namespace: each is
	// closed once that container's exit is recorded.
	InPodPIDNamespace(podID string) []<-chan struct{}
	// Kill kills the pod's containers.
	Kill(ctx context.Context, podID string) error
	// Remove removes the pod's containers, forcibly when running.
	Remove(ctx context.Context, podID string) error
	// Discard rolls back the containers of a pod whose own create was cut
	// short; what it cannot remove, the start-up sweep finds.
	Discard(ctx context.Context, podID string)
}

// Deps are what the controller needs of the daemon around it; none may be
// nil.
type Deps struct {
	Records    Records
	Network    Network
	Pins       Pins
	Infra      Infra
	Containers Containers
	// InfraOptions confine a pod's infra process as its containers are.
	InfraOptions func(cfg *runtime.PodSandboxConfig) (conmon.PauseOptions, error)
	// PluginsRun hands a pod about to be ready to the NRI plugins, any of
	// which may refuse it.
	PluginsRun func(ctx context.Context, rec lifecycle.SandboxRecord) error
	// ToScope moves a process of minicri's own into a systemd scope, unit
	// in slice, and ScopeGone stops that scope once the process has
	// ended. Both do nothing without the systemd driver, and log what
	// fails.
	ToScope   func(ctx context.Context, pid int, start uint64, unit, slice, what string)
	ScopeGone func(ctx context.Context, unit, what string)
	Log       *logrus.Entry
	Metrics   *metrics.Metrics // nil: not collected
}

// Options are the controller's settings.
type Options struct {
	// RunDir holds the pod dirs, in RunDir/pods.
	RunDir string
	// MonitorPath is the monitor binary, which is the infra process too.
	MonitorPath string
	// Systemd is the systemd cgroup driver: a pod's infra process goes to
	// a scope in the pod's slice.
	Systemd bool
}

// Controller makes, stops, removes and repairs pod sandboxes. The caller
// holds the sandbox's lock across each call, and its metric phases are on
// the call's context (lifecycle.WithPhases).
type Controller struct {
	opts Options
	deps Deps
	// claims hold the host IDs of the pods being made (claims.go).
	claims hostIDClaims
}

// New returns a controller on deps.
func New(opts Options, deps Deps) *Controller {
	return &Controller{opts: opts, deps: deps}
}

// podDir is the pod dir of sandbox id.
func (c *Controller) podDir(id string) string {
	return filepath.Join(c.opts.RunDir, "pods", id)
}
