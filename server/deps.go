package server

import (
	"context"
	"fmt"
	"io"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/oci"
)

// What the server needs of the packages below it, declared here, where it is
// used: the packages keep returning concrete types, New wires those in, and a
// unit test wires in the fakes of server/internal/fake instead, so that a
// handler's validation, lookups, error codes and cleanup are tested without
// root, runc or CNI (docs/development.md).

// imageStore is what the image and container handlers need of the image
// store (*image.Store).
type imageStore interface {
	Get(ref string) (image.Image, error)
	List() []image.Image
	Pull(ctx context.Context, ref string, auth *image.Auth) (image.Image, error)
	Remove(ref string) error
	FsInfo() (image.FsUsage, error)
	rootfsStore
}

// rootfsStore makes and removes the containers' root filesystems.
type rootfsStore interface {
	PrepareRootfs(id, imageID string) error
	PrepareImageVolume(id, imageID string) error
	MountRootfs(id string) (string, error)
	MountRootfsIDMapped(id string, idmap image.IDMap) (string, error)
	RemoveRootfs(id string) error
	RootfsUsage(id string) (image.FsUsage, error)
	Rootfses() []string
}

// networkPlugin attaches pods to the pod network (*network.CNI).
type networkPlugin interface {
	Setup(ctx context.Context, pn network.PodNetwork) (network.Result, error)
	Teardown(ctx context.Context, pn network.PodNetwork) error
	Ready() error
	AttachedPods() ([]string, error)
	WriteConfFromTemplate(tmplPath string, values network.TemplateValues) (written bool, err error)
}

// sandboxPins pins a pod's shared namespaces and mounts its /dev/shm: the
// parts of a sandbox that need root (hostPins).
type sandboxPins interface {
	Pin(dir string, kinds []network.NamespaceKind, hostname string) (network.Namespaces, error)
	Unpin(ns network.Namespaces) error
	MountShm(path string, size int) error
	UnmountShm(path string) error
}

// containerMonitor starts the monitors that create and serve the containers
// (conmon).
type containerMonitor interface {
	Create(ctx context.Context, o conmon.Options) (conmon.Created, error)
	// BeginJoin has the shared monitor in joinDir start preparing the
	// container while its bundle is written; the runtime's create waits
	// for Finish.
	BeginJoin(ctx context.Context, joinDir string, o conmon.Options) (pendingJoin, error)
	// WatchContainer returns a channel closed once the monitor is done
	// with the container whose socket is in socketDir.
	WatchContainer(socketDir string) (<-chan struct{}, error)
	monitorSockets
}

// pendingJoin is a join begun before the bundle was complete
// (*conmon.PendingJoin): exactly one of Finish, once the bundle is
// written, and Cancel, when it could not be, follows.
type pendingJoin interface {
	Finish() (conmon.Created, error)
	Cancel()
}

// monitorSockets are the calls on a running monitor's socket.
type monitorSockets interface {
	Attach(ctx context.Context, socketDir string, stdin io.Reader, stdout, stderr io.Writer, resize <-chan conmon.Size) error
	ReopenLog(ctx context.Context, socketDir string) error
}

// podInfra runs the infra process of a pod that shares its PID namespace.
type podInfra interface {
	StartPause(binary, podDir string) (conmon.Infra, error)
	StopPause(ctx context.Context, in conmon.Infra) error
}

// runtimeSet is the OCI runtimes by RuntimeClass handler (*oci.Handlers).
type runtimeSet interface {
	// Get returns the runtime of handler; "" is the default handler.
	Get(handler string) (ociRuntime, error)
	Names() []string
}

// ociRuntime is one OCI runtime (*oci.Runtime): the container calls, and
// what a monitor needs to run it.
type ociRuntime interface {
	Start(ctx context.Context, id string) error
	State(ctx context.Context, id string) (oci.State, error)
	Kill(ctx context.Context, id string, sig syscall.Signal, all bool) error
	Delete(ctx context.Context, id string, force bool) error
	Update(ctx context.Context, id string, res *specs.LinuxResources) error
	Exec(ctx context.Context, id, stateDir string, proc *specs.Process, o oci.ExecIO) (int, error)
	// PrimeCgroupMove readies the kernel, in the background, for the move
	// into a cgroup that a create is about to make (oci.Runtime's).
	PrimeCgroupMove()
	runtimeBinary
}

// runtimeBinary is the runtime's binary and global options, which Status
// checks and a monitor runs.
type runtimeBinary interface {
	Available() error
	Features() (oci.Features, error)
	Binary() (string, error)
	// StateRoot is the runtime's --root; "" is the runtime's default.
	StateRoot() string
	SystemdCgroup() bool
}

// ociHandlers is the real runtimeSet.
type ociHandlers struct{ *oci.Handlers }

func (h ociHandlers) Get(handler string) (ociRuntime, error) {
	rt, err := h.Handlers.Get(handler)
	if err != nil {
		return nil, err // not a nil *oci.Runtime in a non-nil interface
	}
	return ociRuntimeOf{rt}, nil
}

// ociRuntimeOf gives an *oci.Runtime's fields as the methods of ociRuntime.
type ociRuntimeOf struct{ *oci.Runtime }

func (r ociRuntimeOf) StateRoot() string   { return r.Root }
func (r ociRuntimeOf) SystemdCgroup() bool { return r.Runtime.SystemdCgroup }

// conmonMonitor is the real containerMonitor and podInfra.
type conmonMonitor struct{}

func (conmonMonitor) Create(ctx context.Context, o conmon.Options) (conmon.Created, error) {
	return conmon.Create(ctx, o)
}

func (conmonMonitor) BeginJoin(ctx context.Context, joinDir string, o conmon.Options) (pendingJoin, error) {
	p, err := conmon.BeginJoin(ctx, joinDir, o)
	if err != nil {
		return nil, err // not a nil *conmon.PendingJoin in a non-nil interface
	}
	return p, nil
}

func (conmonMonitor) WatchContainer(socketDir string) (<-chan struct{}, error) {
	return conmon.WatchContainer(socketDir)
}

func (conmonMonitor) Attach(ctx context.Context, socketDir string, stdin io.Reader, stdout, stderr io.Writer, resize <-chan conmon.Size) error {
	return conmon.Attach(ctx, socketDir, stdin, stdout, stderr, resize)
}

func (conmonMonitor) ReopenLog(ctx context.Context, socketDir string) error {
	return conmon.ReopenLog(ctx, socketDir)
}

func (conmonMonitor) StartPause(binary, podDir string) (conmon.Infra, error) {
	return conmon.StartPause(binary, podDir)
}

func (conmonMonitor) StopPause(ctx context.Context, in conmon.Infra) error {
	return conmon.StopPause(ctx, in)
}

// hostPins is the real sandboxPins.
type hostPins struct{}

func (hostPins) Pin(dir string, kinds []network.NamespaceKind, hostname string) (network.Namespaces, error) {
	return network.PinNamespaces(dir, kinds, hostname)
}

func (hostPins) Unpin(ns network.Namespaces) error { return network.UnpinNamespaces(ns) }

func (hostPins) MountShm(path string, size int) error {
	opts := fmt.Sprintf("mode=1777,size=%d", size)
	return unix.Mount("shm", path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts)
}

func (hostPins) UnmountShm(path string) error { return unmountIfMounted(path) }
