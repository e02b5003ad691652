package server

import (
	"context"
	"errors"
	"fmt"
	"io"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/podsandbox"
)

// The real dependencies: the adapters that give the packages below server/
// the methods of the small interfaces the handlers declare beside
// themselves (imageStore in image_list.go, rootfsStore in
// container_mounts.go, podNetworking in sandbox_controller.go, ...) and those
// server/podsandbox declares (podsandbox.Pins, podsandbox.Infra). New wires these
// in, one per role; a unit test wires in the fakes of server/internal/fake
// instead, so that a handler's validation, lookups, error codes and cleanup
// are tested without root, runc or CNI (docs/development.md).

// useImages wires one image store (*image.Store, fake.Images) into every
// role the handlers have for it.
func (s *Server) useImages(im interface {
	imageStore
	rootfsStore
	rootfsMounter
	diskUsage
	rootfsDiffer
	imagePolicy
}) {
	s.images, s.rootfs, s.mounts, s.usage, s.diffs, s.policy = im, im, im, im, im, im
}

// useCNI wires one CNI (*network.CNI, fake.Network) into both its roles.
func (s *Server) useCNI(c interface {
	podNetworking
	networkConfig
}) {
	s.cni, s.cniConf = c, c
}

// useMonitor wires one monitor starter (conmonMonitor, the tests' fake)
// into its roles.
func (s *Server) useMonitor(m interface {
	containerMonitor
	monitorSockets
	podsandbox.Infra
}) {
	s.monitor, s.sockets, s.infra = m, m, m
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

// conmonMonitor is the real containerMonitor and podsandbox.Infra.
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

func (conmonMonitor) WatchContainer(socketDir string, done func()) error {
	return conmon.WatchContainer(socketDir, done)
}

func (conmonMonitor) Attach(ctx context.Context, socketDir string, stdin io.Reader, stdout, stderr io.Writer, resize <-chan conmon.Size) error {
	return conmon.Attach(ctx, socketDir, stdin, stdout, stderr, resize)
}

func (conmonMonitor) ReopenLog(ctx context.Context, socketDir string) error {
	return conmon.ReopenLog(ctx, socketDir)
}

func (conmonMonitor) StartPause(binary, podDir string, opts conmon.PauseOptions) (conmon.Infra, error) {
	return conmon.StartPause(binary, podDir, opts)
}

func (conmonMonitor) StopPause(ctx context.Context, in conmon.Infra) error {
	return conmon.StopPause(ctx, in)
}

// hostPins is the real podsandbox.Pins: its pods' pins are made below root,
// the run dir's pods directory.
type hostPins struct{ root *network.PinRoot }

func (p hostPins) Pin(dir string, kinds []network.NamespaceKind, hostname string) (network.Namespaces, error) {
	return p.root.PinNamespaces(dir, kinds, hostname)
}

func (hostPins) Unpin(ns network.Namespaces) error { return network.UnpinNamespaces(ns) }

func (hostPins) MountShm(path string, size int) error {
	opts := fmt.Sprintf("mode=1777,size=%d", size)
	return unix.Mount("shm", path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts)
}

func (hostPins) UnmountShm(path string) error { return unmountIfMounted(path) }

// unmountIfMounted detaches a mount; a path that is not a mount point (or is
// not there) is fine.
func unmountIfMounted(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}
