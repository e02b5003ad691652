// Package nri runs the Node Resource Interface (github.com/containerd/nri)
// for minicri: it starts the plugins (launched from the plugin dir, or
// connecting to the NRI socket), relays the lifecycle of pods and containers
// to them, and applies their adjustments to a container's OCI spec. It takes
// NRI's own api types, which the server fills from its records; it knows
// nothing of the CRI.
//
// A nil *NRI is a disabled one: every method is then a no-op, so that the
// server calls it without asking whether NRI is on.
package nri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/sirupsen/logrus"
)

// Config is the [nri] section, as the server hands it over.
type Config struct {
	SocketPath          string
	PluginPath          string
	PluginConfigPath    string
	RegistrationTimeout time.Duration
	RequestTimeout      time.Duration
	DisableConnections  bool
}

// Runtime is what NRI needs of the runtime beyond the events it is told.
type Runtime interface {
	// State lists every pod and container, for synchronizing a plugin that
	// registers: at start, late, or after a restart of the daemon.
	State(ctx context.Context) ([]*api.PodSandbox, []*api.Container, error)
	// UpdateContainers applies the plugins' updates of containers' resources;
	// it answers those that failed.
	UpdateContainers(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error)
}

// NRI is the running adaptation.
type NRI struct {
	a   *adaptation.Adaptation
	rt  Runtime
	log *logrus.Entry
	// plugins is how many plugins take events, as the library counts them
	// (pluginCount): a closed one counts until the next event drops it.
	plugins atomic.Int64
	// pluginPath is the plugin dir, whose plugins Start launches.
	pluginPath string
	// noneLaunched is set by Start when the plugin dir holds no plugin: the
	// library's synchronization of the launched plugins, the first sync,
	// then has nobody to tell, and the state need not be made (it reads
	// every container's config.json, work that grows with the pods).
	noneLaunched atomic.Bool
}

// New prepares NRI; Start starts the plugins and the socket.
func New(cfg Config, name, version string, rt Runtime, log *logrus.Entry) (*NRI, error) {
	// Process-wide in the library, and set without a lock: once, before
	// any adaptation's goroutines log.
	setLogger.Do(func() { nrilog.Set(logger{log}) })
	adaptation.SetPluginRegistrationTimeout(cfg.RegistrationTimeout)
	adaptation.SetPluginRequestTimeout(cfg.RequestTimeout)
	n := &NRI{rt: rt, log: log, pluginPath: cfg.PluginPath}
	opts := []adaptation.Option{
		adaptation.WithMetrics(pluginCount{&n.plugins}),
		adaptation.WithSocketPath(cfg.SocketPath),
		adaptation.WithPluginPath(cfg.PluginPath),
		adaptation.WithPluginConfigPath(cfg.PluginConfigPath),
	}
	if cfg.DisableConnections {
		opts = append(opts, adaptation.WithDisabledExternalConnections())
	}
	a, err := adaptation.New(name, version, n.sync, n.update, opts...)
	if err != nil {
		return nil, fmt.Errorf("nri: %w", err)
	}
	n.a = a
	return n, nil
}

// Start launches the plugins of the plugin dir, synchronizes them with the
// runtime's state, and listens for plugins on the socket.
func (n *NRI) Start() error {
	if n == nil {
		return nil
	}
	// The library synchronizes the plugins it launches before it listens
	// on the socket, so the first sync is theirs; a plugin that connects
	// later always gets the whole state.
	n.noneLaunched.Store(!hasPlugins(n.pluginPath))
	err := n.a.Start()
	n.noneLaunched.Store(false) // the sync did not run when Start failed early
	if err != nil {
		return fmt.Errorf("nri: start: %w", err)
	}
	return nil
}

// hasPlugins reports whether dir may hold a plugin to launch: anything but
// subdirectories there (the library launches executable files), or a dir
// it cannot read.
func hasPlugins(dir string) bool {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		return true
	}
	for _, e := range entries {
		if !e.IsDir() {
			return true
		}
	}
	return false
}

// Stop stops the launched plugins and closes the socket.
func (n *NRI) Stop() {
	if n != nil {
		n.a.Stop()
	}
}

// sync is the library's SyncFn: it runs whenever plugins register, with the
// plugins' callback, and applies the updates they answer.
func (n *NRI) sync(ctx context.Context, cb adaptation.SyncCB) error {
	if n.noneLaunched.CompareAndSwap(true, false) {
		_, err := cb(ctx, nil, nil)
		return err
	}
	pods, containers, err := n.rt.State(ctx)
	if err != nil {
		return fmt.Errorf("list pods and containers: %w", err)
	}
	updates, err := cb(ctx, pods, containers)
	if err != nil {
		return err
	}
	if len(updates) == 0 {
		return nil
	}
	failed, err := n.rt.UpdateContainers(ctx, updates)
	if err != nil || len(failed) > 0 {
		n.log.WithError(err).WithField("failed", len(failed)).Warn("nri: updates asked at synchronization not all applied")
	}
	return nil
}

// update is the library's UpdateFn: a plugin's unsolicited updates.
func (n *NRI) update(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	return n.rt.UpdateContainers(ctx, updates)
}

// Active reports whether any plugin takes events: when none does, the
// caller may skip an event and the making of its pod and container.
// A plugin that registers meanwhile is synchronized with the state instead.
func (n *NRI) Active() bool {
	return n != nil && n.plugins.Load() > 0
}

// BlockSync keeps plugins from being synchronized until the returned func
// runs: held across the making of a pod or container, from its NRI event to
// its record, so that a plugin registering meanwhile sees it either in the
// synchronization or as an event, never in neither nor both.
func (n *NRI) BlockSync() func() {
	if n == nil {
		return func() {}
	}
	return n.a.BlockPluginSync().Unblock
}

// RunPodSandbox tells the plugins of a new pod; an error refuses the pod.
func (n *NRI) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if n == nil {
		return nil
	}
	return wrap("RunPodSandbox", n.a.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod}))
}

// StopPodSandbox tells the plugins of a stopped pod.
func (n *NRI) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if n == nil {
		return nil
	}
	return wrap("StopPodSandbox", n.a.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: pod}))
}

// RemovePodSandbox tells the plugins of a removed pod.
func (n *NRI) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if n == nil {
		return nil
	}
	return wrap("RemovePodSandbox", n.a.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: pod}))
}

// UpdatePodSandbox tells the plugins of a pod's new resources and overhead
// before the kubelet applies them to the pod's cgroup.
func (n *NRI) UpdatePodSandbox(ctx context.Context, pod *api.PodSandbox, overhead, resources *api.LinuxResources) error {
	if n == nil {
		return nil
	}
	_, err := n.a.UpdatePodSandbox(ctx, &api.UpdatePodSandboxRequest{Pod: pod, OverheadLinuxResources: overhead, LinuxResources: resources})
	return wrap("UpdatePodSandbox", err)
}

// PostUpdatePodSandbox tells the plugins that a pod's update is done.
func (n *NRI) PostUpdatePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if n == nil {
		return nil
	}
	return wrap("PostUpdatePodSandbox", n.a.PostUpdatePodSandbox(ctx, &api.PostUpdatePodSandboxRequest{Pod: pod}))
}

// CreateContainer asks the plugins about a container about to be made: it
// answers their adjustment of its spec, and their updates of other
// containers. An error refuses the container.
func (n *NRI) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if n == nil {
		return nil, nil, nil
	}
	resp, err := n.a.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: ctr})
	if err != nil {
		return nil, nil, wrap("CreateContainer", err)
	}
	n.logEvictions(resp.GetEvict())
	return resp.GetAdjust(), resp.GetUpdate(), nil
}

// PostCreateContainer tells the plugins that a container was made.
func (n *NRI) PostCreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if n == nil {
		return nil
	}
	return wrap("PostCreateContainer", n.a.PostCreateContainer(ctx, &api.PostCreateContainerRequest{Pod: pod, Container: ctr}))
}

// StartContainer tells the plugins of a container about to start; an error
// refuses the start.
func (n *NRI) StartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if n == nil {
		return nil
	}
	return wrap("StartContainer", n.a.StartContainer(ctx, &api.StartContainerRequest{Pod: pod, Container: ctr}))
}

// PostStartContainer tells the plugins that a container started.
func (n *NRI) PostStartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if n == nil {
		return nil
	}
	return wrap("PostStartContainer", n.a.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: pod, Container: ctr}))
}

// UpdateContainer asks the plugins about new resources of a container: it
// answers the resources to apply to it (res when no plugin changed them)
// and the plugins' updates of other containers.
func (n *NRI) UpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) (*api.LinuxResources, []*api.ContainerUpdate, error) {
	if n == nil {
		return res, nil, nil
	}
	resp, err := n.a.UpdateContainer(ctx, &api.UpdateContainerRequest{Pod: pod, Container: ctr, LinuxResources: res})
	if err != nil {
		return nil, nil, wrap("UpdateContainer", err)
	}
	n.logEvictions(resp.GetEvict())
	var others []*api.ContainerUpdate
	for _, u := range resp.GetUpdate() {
		if u.GetContainerId() == ctr.GetId() {
			if r := u.GetLinux().GetResources(); r != nil {
				res = r
			}
			continue
		}
		others = append(others, u)
	}
	return res, others, nil
}

// PostUpdateContainer tells the plugins that a container's update is done.
func (n *NRI) PostUpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if n == nil {
		return nil
	}
	return wrap("PostUpdateContainer", n.a.PostUpdateContainer(ctx, &api.PostUpdateContainerRequest{Pod: pod, Container: ctr}))
}

// StopContainer tells the plugins of a stopped container, stopped by the
// kubelet or exited on its own; it answers their updates of other
// containers.
func (n *NRI) StopContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	if n == nil {
		return nil, nil
	}
	resp, err := n.a.StopContainer(ctx, &api.StopContainerRequest{Pod: pod, Container: ctr})
	if err != nil {
		return nil, wrap("StopContainer", err)
	}
	return resp.GetUpdate(), nil
}

// RemoveContainer tells the plugins of a removed container.
func (n *NRI) RemoveContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if n == nil {
		return nil
	}
	return wrap("RemoveContainer", n.a.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: pod, Container: ctr}))
}

// logEvictions logs the evictions plugins ask for: as containerd, minicri
// does not evict (the kubelet owns a pod's life).
func (n *NRI) logEvictions(evict []*api.ContainerEviction) {
	for _, e := range evict {
		n.log.WithField("container", e.GetContainerId()).WithField("reason", e.GetReason()).Warn("nri: a plugin asked to evict a container; evictions are not supported")
	}
}

// ErrPlugin marks an error a plugin answered: it refuses the call.
var ErrPlugin = errors.New("nri plugin")

func wrap(event string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s: %w", ErrPlugin, event, err)
}

// pluginCount is the library's Metrics for the count of plugins alone.
type pluginCount struct{ n *atomic.Int64 }

func (pluginCount) RecordPluginInvocation(string, string, error)      {}
func (pluginCount) RecordPluginLatency(string, string, time.Duration) {}
func (c pluginCount) UpdatePluginCount(count int)                     { c.n.Store(int64(count)) }
func (pluginCount) RecordPluginAdjustments(string, string, *api.ContainerAdjustment, int, int) {
}

var setLogger sync.Once

// logger hands the library's log lines to the daemon's log.
type logger struct{ e *logrus.Entry }

func (l logger) Debugf(_ context.Context, f string, a ...any) { l.e.Debugf(f, a...) }
func (l logger) Infof(_ context.Context, f string, a ...any)  { l.e.Infof(f, a...) }
func (l logger) Warnf(_ context.Context, f string, a ...any)  { l.e.Warnf(f, a...) }

// Errorf logs the library's errors, but for the one it logs at every start
// of a build without its WASM plugin runtime (the default, see docs/nri.md):
// that is a choice, not a failure.
func (l logger) Errorf(_ context.Context, f string, a ...any) {
	for _, v := range a {
		if err, ok := v.(error); ok && errors.Is(err, adaptation.ErrWasmDisabled) {
			l.e.Debug("nri: this build has no WASM plugin runtime (make build NRI_WASM=1 adds it)")
			return
		}
	}
	l.e.Errorf(f, a...)
}
