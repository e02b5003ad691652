package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/oci/runcflags"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// containerMonitor starts the monitors that create and serve the
// containers (conmon).
type containerMonitor interface {
	Create(ctx context.Context, o conmon.Options) (conmon.Created, error)
	// BeginJoin has the shared monitor in joinDir start preparing the
	// container while its bundle is written; the runtime's create waits
	// for Finish.
	BeginJoin(ctx context.Context, joinDir string, o conmon.Options) (pendingJoin, error)
	// WatchContainer calls done once the monitor is done with the
	// container whose socket is in socketDir.
	WatchContainer(socketDir string, done func()) error
}

// pendingJoin is a join begun before the bundle was complete
// (*conmon.PendingJoin): exactly one of Finish, once the bundle is
// written, and Cancel, when it could not be, follows.
type pendingJoin interface {
	Finish() (conmon.Created, error)
	Cancel()
}

// monitorRuntime is what a monitor needs to run the OCI runtime
// (*oci.Runtime): its binary and its global options.
type monitorRuntime interface {
	Binary() (string, error)
	// StateRoot is the runtime's --root; "" is the runtime's default.
	StateRoot() string
	SystemdCgroup() bool
}

// monitorPlacement decides which minicri-conmon process serves a new
// container. A monitor serves up to runtime.monitor_share containers: a
// pod's containers go where the pod already has one, pods fill a monitor
// before another starts. Every container in a shared monitor saves a Go
// runtime's floor, about half a MiB; the price is that a monitor that dies
// takes the logs and the containers of all it served, which is why pods
// stay together.
type monitorPlacement struct {
	mu    sync.Mutex
	share int
	// monitors holds the live monitors by pid. A container is in its
	// monitor from its placement until its exit is recorded; its object
	// points at that monitor (container.placed, guarded by mu).
	monitors map[int]*placedMonitor
}

type placedMonitor struct {
	ref        lifecycle.MonitorRef
	closed     bool              // refused a join: takes no more containers
	containers map[string]string // container ID → pod ID
}

func newMonitorPlacement(share int) *monitorPlacement {
	return &monitorPlacement{share: share, monitors: map[int]*placedMonitor{}}
}

// reserve puts a container into a shared monitor with room, if there is
// one: the monitor its pod already uses first, else the fullest. The
// reservation counts at once, so concurrent creates do not overfill it.
func (p *monitorPlacement) reserve(c *container, podID string) (lifecycle.MonitorRef, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best *placedMonitor
	bestPod := 0
	for _, m := range p.monitors {
		if m.closed || m.ref.JoinDir == "" || len(m.containers) >= p.share {
			continue
		}
		pod := 0
		for _, other := range m.containers {
			if other == podID {
				pod++
			}
		}
		if best == nil || pod > bestPod || (pod == bestPod && len(m.containers) > len(best.containers)) {
			best, bestPod = m, pod
		}
	}
	if best == nil {
		return lifecycle.MonitorRef{}, false
	}
	best.containers[c.id] = podID
	c.placed = best
	return best.ref, true
}

// assign records that a monitor serves a container.
func (p *monitorPlacement) assign(ref lifecycle.MonitorRef, c *container, podID string) {
	if ref.PID <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.monitors[ref.PID]
	if m == nil || m.ref.StartTime != ref.StartTime {
		m = &placedMonitor{ref: ref, containers: map[string]string{}}
		p.monitors[ref.PID] = m
	}
	m.containers[c.id] = podID
	c.placed = m
}

// release takes a container out of its monitor, and reports the monitor
// when that was its last container: it takes no more. Releasing twice does
// nothing.
func (p *monitorPlacement) release(c *container) (emptied lifecycle.MonitorRef, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := c.placed
	c.placed = nil
	// One whose pid a later monitor took (assign) is no longer placed.
	if m == nil || p.monitors[m.ref.PID] != m {
		return lifecycle.MonitorRef{}, false
	}
	delete(m.containers, c.id)
	if len(m.containers) == 0 {
		delete(p.monitors, m.ref.PID)
		return m.ref, true
	}
	return lifecycle.MonitorRef{}, false
}

// releaseMonitor takes a container out of its monitor. A monitor left
// empty exits, and a shared one removes its join directory; one that was
// killed cannot, so the directory goes here once the monitor is gone, and
// its scope (under the systemd driver) with it, shared or not. Whether it
// is gone is waited for, not looked at: a killed monitor closes its
// sockets, which is how its containers' ends are seen, before it is a
// zombie.
func (s *Server) releaseMonitor(c *container) {
	ref, emptied := s.monitors.release(c)
	if !emptied || (ref.JoinDir == "" && s.scopes == nil) {
		return
	}
	// A monitor's scope is named after its first container: a shared
	// monitor's join directory is too, an unshared one served c alone.
	first := c.id
	if ref.JoinDir != "" {
		first = filepath.Base(ref.JoinDir)
	}
	gone, err := conmon.WatchMonitor(ref.PID, ref.StartTime)
	if err != nil || !waitClosed(context.Background(), gone, killGrace) {
		s.log.WithField("monitor", ref.PID).WithError(err).Warn("monitor still there after its last container; its scope stays to systemd, a join directory to the start-up sweep")
		return
	}
	if ref.JoinDir != "" {
		os.RemoveAll(ref.JoinDir)
	}
	s.scopeGone(context.Background(), monitorScope(first), "monitor of container "+first)
}

// markClosed marks a monitor that refused a join: it takes no more
// containers, though those it serves still count until their exits are
// recorded.
func (p *monitorPlacement) markClosed(ref lifecycle.MonitorRef) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m := p.monitors[ref.PID]; m != nil {
		m.closed = true
	}
}

// monitorStart is a container's monitor under way: the shared monitor it
// joins, whose join began while the bundle was written, or none yet, when a
// new monitor starts once the bundle is complete.
type monitorStart struct {
	opts conmon.Options
	ref  lifecycle.MonitorRef // the shared monitor joined
	join pendingJoin          // nil: a new monitor
}

// beginMonitor picks the container's monitor before its bundle is written:
// a shared one with room, whose join begins at once, so that its helper
// (a process of its own) starts and prepares meanwhile; else none yet.
func (s *Server) beginMonitor(ctx context.Context, c *container, rec lifecycle.ContainerRecord, opts conmon.Options) (*monitorStart, error) {
	for {
		ref, ok := s.monitors.reserve(c, rec.SandboxID)
		if !ok {
			return &monitorStart{opts: opts}, nil
		}
		join, err := s.monitor.BeginJoin(ctx, ref.JoinDir, opts)
		if errors.Is(err, conmon.ErrJoinRefused) {
			s.joinRefused(c, ref, err)
			continue
		}
		if err != nil {
			s.releaseMonitor(c)
			return nil, err
		}
		return &monitorStart{opts: opts, ref: ref, join: join}, nil
	}
}

// cancelMonitor gives up the join begun for a container whose bundle
// failed; its helper is gone when it returns.
func (s *Server) cancelMonitor(c *container, st *monitorStart) {
	if st.join != nil {
		st.join.Cancel()
		s.releaseMonitor(c)
	}
}

// finishMonitor has the container created once its bundle is complete: by
// the shared monitor joined, else (none, or it refused) by another shared
// one or a new one, which is shared in turn unless monitor_share is 1.
func (s *Server) finishMonitor(ctx context.Context, c *container, rec lifecycle.ContainerRecord, st *monitorStart) (lifecycle.MonitorRef, error) {
	for st.join != nil {
		created, err := st.join.Finish()
		if errors.Is(err, conmon.ErrJoinRefused) {
			s.joinRefused(c, st.ref, err)
			if st, err = s.beginMonitor(ctx, c, rec, st.opts); err != nil {
				return lifecycle.MonitorRef{}, err
			}
			continue
		}
		if err == nil && (created.MonitorPID != st.ref.PID || created.MonitorStartTime != st.ref.StartTime) {
			err = fmt.Errorf("joined monitor %d, not the shared monitor %d", created.MonitorPID, st.ref.PID)
		}
		if err != nil {
			s.releaseMonitor(c)
			return lifecycle.MonitorRef{}, err
		}
		return st.ref, nil
	}
	opts := st.opts
	if s.cfg.Runtime.MonitorShare > 1 {
		opts.JoinDir = filepath.Join(s.cfg.RunDir, "monitors", rec.ID)
		if err := os.MkdirAll(opts.JoinDir, 0o700); err != nil {
			return lifecycle.MonitorRef{}, fmt.Errorf("create monitor dir: %w", err)
		}
	}
	created, err := s.monitor.Create(ctx, opts)
	if err != nil {
		if opts.JoinDir != "" {
			os.RemoveAll(opts.JoinDir)
		}
		return lifecycle.MonitorRef{}, err
	}
	ref := lifecycle.MonitorRef{PID: created.MonitorPID, StartTime: created.MonitorStartTime, JoinDir: opts.JoinDir}
	s.monitors.assign(ref, c, rec.SandboxID)
	s.leaveDaemonCgroup(ctx, ref.PID, ref.StartTime, monitorScope(rec.ID), monitorSlice, "monitor of container "+rec.ID)
	return ref, nil
}

// joinRefused takes a shared monitor that refused a join out of the
// placement: it is not asked again.
func (s *Server) joinRefused(c *container, ref lifecycle.MonitorRef, err error) {
	s.log.WithField("monitor", ref.PID).WithError(err).Info("shared monitor takes no more containers")
	s.releaseMonitor(c)
	s.monitors.markClosed(ref)
}

func (s *Server) monitorOptions(rec lifecycle.ContainerRecord, rt monitorRuntime, cfg *runtime.ContainerConfig) (conmon.Options, error) {
	bin, err := rt.Binary()
	if err != nil {
		return conmon.Options{}, err
	}
	return conmon.Options{
		ID:          rec.ID,
		Bundle:      rec.Bundle,
		Runtime:     bin,
		RuntimeRoot: rt.StateRoot(),
		// --root travels on its own (RuntimeRoot); the rest rendered here.
		RuntimeArgs: runcflags.Global{SystemdCgroup: rt.SystemdCgroup()}.Args(),
		LogPath:     rec.LogPath,
		ExitFile:    exitFile(rec),
		SocketDir:   rec.Bundle,
		Terminal:    cfg.GetTty(),
		Stdin:       cfg.GetStdin(),
		StdinOnce:   cfg.GetStdinOnce(),
		Binary:      s.monitorPath,
	}, nil
}

// sweepMonitorDirs removes the join directories of monitors that are gone:
// a monitor removes its own when it exits, unless it was killed. Each
// monitor's liveness is read once, however many containers it serves.
func (s *Server) sweepMonitorDirs() {
	alive := monitorLiveness{}
	live := map[string]bool{}
	for _, c := range s.containers.List() {
		if c.Monitor.JoinDir != "" && alive.of(c.Monitor) {
			live[c.Monitor.JoinDir] = true
		}
	}
	dir := filepath.Join(s.cfg.RunDir, "monitors")
	for _, id := range idDirs(dir) {
		path := filepath.Join(dir, id)
		if !live[path] {
			s.sweep("monitor dir", id, os.RemoveAll(path))
		}
	}
}
