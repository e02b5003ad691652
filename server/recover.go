package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/internal/procstat"
	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/store"
)

// recoverTimeout bounds the whole start-up repair.
const recoverTimeout = time.Minute

// recover rebuilds the daemon's view of the node from the records and the
// running monitors, before the first call is served:
//   - names are reserved again;
//   - half-made objects (a crash during a create) are rolled back;
//   - running containers are watched again, and a container whose start was
//     cut short after the runtime's start is recorded as running;
//   - containers whose monitor ended while the daemon was down get their
//     exit from the monitor's exit file (or a reason when there is none);
//   - ready sandboxes that lost a namespace, their network or their infra
//     process (a reboot, a crash during a stop or a removal) are not ready;
//   - what no record names any more (pod dirs, bundles, root filesystems,
//     CNI attachments) is removed.
//
// Every step is idempotent, so a crash during the repair is repaired by the
// next start.
//
// It marks its phases (containers, sandboxes, sweep) on ctx's timer.
func (s *Server) recover(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, recoverTimeout)
	defer cancel()
	s.recoverContainers(ctx)
	lifecycle.PhaseDone(ctx, "containers")
	attached := s.attachedPods()
	for _, sb := range s.sandboxes.List() {
		s.recoverSandbox(ctx, sb, attached)
	}
	lifecycle.PhaseDone(ctx, "sandboxes")
	s.sweepOrphans(ctx)
	lifecycle.PhaseDone(ctx, "sweep")
}

// recoverWorkers is how many containers are watched again (or have their
// exit recorded) at once: each is a connection to its monitor or a read of
// its exit file, and waits on the kernel more than it works, so one after
// the other they would make a restart grow with the containers' waits.
const recoverWorkers = 8

// recoverContainers recovers every container in three steps:
//   - the creates cut short are rolled back, one at a time;
//   - every container whose monitor still runs is placed on it, each
//     monitor's liveness read once (a shared one serves up to
//     runtime.monitor_share containers). All are placed before any exit is
//     recorded: the release of a monitor's last container waits for the
//     monitor to end, and one whose other containers were not placed yet
//     would be waited for in vain (killGrace);
//   - then side by side, each is watched again, or its exit recorded.
func (s *Server) recoverContainers(ctx context.Context) {
	alive := monitorLiveness{}
	var running, ended []lifecycle.ContainerRecord
	for _, c := range s.containers.List() {
		switch {
		case c.State == lifecycle.StateCreating:
			s.rollBackContainer(ctx, c)
			continue
		case c.State == lifecycle.StateExited:
		case alive.of(c.Monitor):
			s.monitors.assign(c.Monitor, s.ctr(c.ID), c.SandboxID) // Open made the object with the record
			running = append(running, c)
		default:
			ended = append(ended, c)
		}
		_ = s.containerNames.Reserve(c.Name, c.ID)
	}
	var g errgroup.Group
	g.SetLimit(recoverWorkers)
	for _, c := range running {
		g.Go(func() error {
			s.rewatchContainer(ctx, c)
			return nil
		})
	}
	for _, c := range ended {
		g.Go(func() error {
			s.metrics.Repaired("container_exit_recorded")
			s.recordExit(c.ID)
			return nil
		})
	}
	_ = g.Wait()
}

// rollBackContainer undoes a create that the daemon's end cut short.
func (s *Server) rollBackContainer(ctx context.Context, c lifecycle.ContainerRecord) {
	log := s.log.WithField("container", c.ID)
	log.Info("rolling back a container whose create was cut short")
	s.metrics.Repaired("container_create_rolled_back")
	// The monitor's create may still run: ended first, or it would
	// make the container after the runtime's delete below.
	if err := conmon.StopCreate(c.Bundle); err != nil {
		log.WithError(err).Warn("stop the create under way")
	}
	if err := s.discardContainer(ctx, c); err != nil {
		log.WithError(err).Warn("roll back container")
	}
}

// rewatchContainer watches a container whose monitor runs, placed on it.
func (s *Server) rewatchContainer(ctx context.Context, c lifecycle.ContainerRecord) {
	if c.State == lifecycle.StateCreated {
		s.recoverStart(ctx, c)
	}
	// A shared monitor outlives the containers it served: one that ended
	// while the daemon was down has its exit file already, and is recorded
	// now, before the first call can see it running.
	if _, exited, _ := conmon.ReadExit(exitFile(c)); exited {
		s.recordExit(c.ID)
		return
	}
	s.watchContainer(c)
}

// monitorLiveness answers conmon.Alive once per monitor (pid and start
// time), for one pass over the records.
type monitorLiveness map[lifecycle.MonitorRef]bool

func (l monitorLiveness) of(m lifecycle.MonitorRef) bool {
	key := lifecycle.MonitorRef{PID: m.PID, StartTime: m.StartTime}
	alive, ok := l[key]
	if !ok {
		alive = conmon.Alive(m.PID, m.StartTime)
		l[key] = alive
	}
	return alive
}

// recoverStart finishes a StartContainer that a crash cut between the
// runtime's start and the record: the kubelet must see the container
// running, not created (a second start would fail).
func (s *Server) recoverStart(ctx context.Context, c lifecycle.ContainerRecord) {
	rt, err := s.runtimes.Get(c.Handler)
	if err != nil {
		return
	}
	st, err := rt.State(ctx, c.ID)
	if err != nil || (st.Status != oci.StatusRunning && st.Status != oci.StatusPaused) {
		return
	}
	startedAt, err := processStartTime(st.Pid)
	if err != nil {
		startedAt = time.Now()
	}
	s.log.WithField("container", c.ID).Info("container was started before the daemon went down; recording it as running")
	s.metrics.Repaired("container_start_recorded")
	_, err = s.containers.Observe(c.ID, func(r *lifecycle.ContainerRecord) error {
		if r.State == lifecycle.StateCreated {
			r.State = lifecycle.StateRunning
			// The boot time has whole seconds: never before the create.
			r.StartedAt = max(startedAt.UnixNano(), r.CreatedAt)
		}
		return nil
	})
	if err != nil {
		s.log.WithField("container", c.ID).WithError(err).Warn("record recovered start")
	}
}

// recoverSandbox reserves a made sandbox's name again, and repairs it
// (podsandbox.Controller.Repair).
func (s *Server) recoverSandbox(ctx context.Context, sb lifecycle.SandboxRecord, attached map[string]bool) {
	if sb.State != lifecycle.StateCreating {
		_ = s.sandboxNames.Reserve(sb.Name, sb.ID)
	}
	s.pods.Repair(ctx, sb, attached)
}

// attachedPods are the pods CNI holds an attachment (and an IP) for; nil
// when they cannot be listed.
func (s *Server) attachedPods() map[string]bool {
	ids, err := s.cni.AttachedPods()
	if err != nil {
		s.log.WithError(err).Warn("list CNI attachments")
		return nil
	}
	attached := make(map[string]bool, len(ids))
	for _, id := range ids {
		attached[id] = true
	}
	return attached
}

// sweepOrphans removes what a record should name but none does. The create
// paths write the record before making anything and the remove paths delete
// it last, so this only finds the leftovers of a lost or corrupt record; an
// ID whose record file is still on disk (corrupt, kept for the operator) is
// left alone.
func (s *Server) sweepOrphans(ctx context.Context) {
	knownSandbox := s.hasSandboxRecord
	knownContainer := s.hasContainerRecord
	for id := range s.attachedPods() { // listed again: the roll-backs above removed some
		if !knownSandbox(id) {
			s.sweep("CNI attachment", id, s.cni.Teardown(ctx, network.PodNetwork{ID: id}))
		}
	}
	for _, id := range idDirs(filepath.Join(s.cfg.RunDir, "pods")) {
		if !knownSandbox(id) {
			s.sweep("pod dir", id, s.pods.RemoveOrphan(ctx, id))
		}
	}
	for _, id := range idDirs(filepath.Join(s.cfg.RunDir, "containers")) {
		if !knownContainer(id) {
			s.sweep("container bundle", id, s.discardOrphanContainer(ctx, id))
		}
	}
	for _, id := range s.rootfs.Rootfses() {
		// An image volume's rootfs is its container's (rootfsOwner).
		if !knownContainer(rootfsOwner(id)) {
			s.sweep("container root filesystem", id, s.rootfs.RemoveRootfs(id))
		}
	}
	s.sweepInfraProcesses(ctx)
	s.sweepMonitorDirs()
	s.sweepCheckpointStages()
}

// sweepCheckpointStages removes what a checkpoint, or CRIU's probe, was
// staging when the daemon died: each lives only as long as its call.
func (s *Server) sweepCheckpointStages() {
	dir := filepath.Join(s.cfg.Root, checkpointsDir)
	entries, _ := os.ReadDir(dir) // none: nothing to sweep
	for _, e := range entries {
		s.sweep("checkpoint staging dir", e.Name(), os.RemoveAll(filepath.Join(dir, e.Name())))
	}
}

// sweepInfraProcesses stops the infra processes that a pod dir names but
// its sandbox record does not (podsandbox.Controller.StopStrayInfra). Only
// minicri's own pod dirs are read: the cost grows with minicri's pods, not
// with the node's processes.
func (s *Server) sweepInfraProcesses(ctx context.Context) {
	for _, id := range idDirs(filepath.Join(s.cfg.RunDir, "pods")) {
		if stopped, err := s.pods.StopStrayInfra(ctx, id); stopped || err != nil {
			s.sweep("pod infra process", id, err)
		}
	}
}

func (s *Server) sweep(what, id string, err error) {
	log := s.log.WithField("id", id)
	if err != nil {
		log.WithError(err).Warnf("remove orphaned %s", what)
		return
	}
	log.Infof("removed orphaned %s", what)
	s.metrics.Repaired("orphan_removed")
}

// hasSandboxRecord reports whether a sandbox has a record, in memory or on disk.
func (s *Server) hasSandboxRecord(id string) bool {
	return hasRecord(s.sandboxes, filepath.Join(s.cfg.Root, sandboxesDir), id)
}

// hasContainerRecord reports whether a container has a record, in memory or on disk.
func (s *Server) hasContainerRecord(id string) bool {
	return hasRecord(s.containers, filepath.Join(s.cfg.Root, containersDir), id)
}

// hasRecord looks on disk too: a corrupt record is not in the table but
// is kept for the operator, and so is what it names.
func hasRecord[T any, O store.Object[T]](t *store.Table[T, O], dir, id string) bool {
	if _, err := t.Get(id); err == nil {
		return true
	}
	_, err := os.Lstat(filepath.Join(dir, id+".json"))
	return !errors.Is(err, os.ErrNotExist)
}

// discardOrphanContainer removes a container that has no record: its handler
// is unknown, so every runtime is asked to forget it.
func (s *Server) discardOrphanContainer(ctx context.Context, id string) error {
	var errs []error
	bundle := filepath.Join(s.cfg.RunDir, "containers", id)
	if err := conmon.StopCreate(bundle); err != nil {
		errs = append(errs, err)
	}
	cgroup := bundleCgroup(bundle)
	for _, name := range s.runtimes.Names() {
		rt, err := s.runtimes.Get(name)
		if err != nil {
			continue
		}
		if err := rt.Delete(ctx, id, true, cgroup); err != nil {
			errs = append(errs, fmt.Errorf("delete from runtime %s: %w", name, err))
		}
	}
	if err := s.rootfs.RemoveRootfs(id); err != nil {
		errs = append(errs, fmt.Errorf("remove rootfs: %w", err))
	}
	if err := os.RemoveAll(bundle); err != nil {
		errs = append(errs, fmt.Errorf("remove bundle: %w", err))
	}
	return errors.Join(errs...)
}

// idDirs lists the subdirectories of dir named like an object ID; anything
// else there is not minicri's to remove.
func idDirs(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && len(e.Name()) == 64 && isID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// processStartTime is when a process started, from its /proc/PID/stat start
// time (field 22, clock ticks since boot) and the boot time in /proc/stat.
func processStartTime(pid int) (time.Time, error) {
	stat, err := procstat.Read(pid)
	if err != nil {
		return time.Time{}, err
	}
	boot, err := bootTime()
	if err != nil {
		return time.Time{}, err
	}
	return boot.Add(time.Duration(stat.StartTime) * time.Second / clockTicks), nil
}

func bootTime() (time.Time, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("/proc/stat btime: %w", err)
			}
			return time.Unix(sec, 0), nil
		}
	}
	return time.Time{}, errors.New("/proc/stat has no btime")
}
