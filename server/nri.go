package server

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/nri"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// The NRI hooks (see docs/nri.md), called from the lifecycle seam
// (lifecycle.go) and, for the events that carry or change what is being
// made, from the handlers: they turn records into NRI's pods and containers
// and relay the event. s.nri is nil
// when NRI is off; its methods then do nothing. While no plugin takes
// events (s.nri.Active), the hooks return at once: a record's translation
// reads the container's config.json, which every create, start, exit and
// removal would pay for nothing.
//
// Where a plugin's error refuses a call (a pod's run, a container's create,
// start or update, a pod's update), the hook runs before anything is kept,
// or the handler's undo takes back what was made, so a retry starts clean.
// Events of things already done (stops, removals, post-events) cannot be
// refused: a plugin's error is logged.

// newNRI makes NRI, before the records are recovered: the exits that the
// recovery's watches record read s.nri. No plugin runs until startNRI.
func (s *Server) newNRI() error {
	c := s.cfg.NRI
	if !c.Enabled {
		return nil
	}
	n, err := nri.New(nri.Config{
		SocketPath:          c.SocketPath,
		PluginPath:          c.PluginPath,
		PluginConfigPath:    c.PluginConfigPath,
		RegistrationTimeout: c.PluginRegistrationTimeout.Std(),
		RequestTimeout:      c.PluginRequestTimeout.Std(),
		DisableConnections:  c.DisableConnections,
	}, RuntimeName, s.version, nriRuntime{s}, s.log.WithField("component", "nri"))
	s.nri = n
	return err
}

// startNRI starts the plugins once the records are recovered, so that those
// launched at start are synchronized with the pods and containers that
// survived the restart.
func (s *Server) startNRI() error {
	return s.nri.Start()
}

// nriRuntime is what NRI asks of the server: the state to synchronize
// plugins with, and the plugins' updates to apply.
type nriRuntime struct{ s *Server }

// State lists the pods and containers that exist, those being made left
// out: NRI's BlockSync keeps a plugin from registering while one is.
func (r nriRuntime) State(context.Context) ([]*api.PodSandbox, []*api.Container, error) {
	var pods []*api.PodSandbox
	for _, sb := range r.s.sandboxes.List() {
		if sb.State != lifecycle.StateCreating {
			pods = append(pods, nriPod(sb))
		}
	}
	var ctrs []*api.Container
	for _, c := range r.s.containers.List() {
		if c.State != lifecycle.StateCreating {
			ctrs = append(ctrs, nriContainer(c, nil))
		}
	}
	return pods, ctrs, nil
}

// UpdateContainers applies plugins' updates of containers' resources
// through UpdateContainerResources's own path; it answers those that failed
// and were not marked IgnoreFailure.
func (r nriRuntime) UpdateContainers(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	var failed []*api.ContainerUpdate
	for _, u := range updates {
		if err := r.s.applyNRIUpdate(ctx, u); err != nil {
			r.s.log.WithField("container", u.GetContainerId()).WithError(err).Warn("nri: a plugin's container update failed")
			if !u.GetIgnoreFailure() {
				failed = append(failed, u)
			}
		}
	}
	return failed, nil
}

func (s *Server) applyNRIUpdate(ctx context.Context, u *api.ContainerUpdate) error {
	rec, unlock, err := s.lockContainer(u.GetContainerId())
	if err != nil {
		return err
	}
	defer unlock()
	if rec.State != lifecycle.StateCreated && rec.State != lifecycle.StateRunning {
		return fmt.Errorf("container %s is %s", rec.ID, rec.State)
	}
	cfg, err := rec.DecodeConfig()
	if err != nil {
		return err
	}
	return s.updateResources(ctx, rec, criResources(cfg.GetLinux().GetResources(), u.GetLinux().GetResources()))
}

// applyNRIUpdatesLater applies the updates of other containers that plugins
// answered to an event, once the handler's locks are released: those
// containers' locks may be held by calls waiting for the locks of this one.
func (s *Server) applyNRIUpdatesLater(updates []*api.ContainerUpdate) {
	if len(updates) == 0 {
		return
	}
	go func() {
		_, _ = nriRuntime{s}.UpdateContainers(context.Background(), updates)
	}()
}

func (s *Server) nriRunPodSandbox(ctx context.Context, rec lifecycle.SandboxRecord) error {
	if !s.nri.Active() {
		return nil
	}
	pod := nriPod(rec)
	if err := s.nri.RunPodSandbox(ctx, pod); err != nil {
		// The plugins that took the pod before one refused it forget it.
		s.nriLog("StopPodSandbox", rec.ID, s.nri.StopPodSandbox(ctx, pod))
		s.nriLog("RemovePodSandbox", rec.ID, s.nri.RemovePodSandbox(ctx, pod))
		return err
	}
	return nil
}

func (s *Server) nriStopPodSandbox(ctx context.Context, rec lifecycle.SandboxRecord) {
	if !s.nri.Active() {
		return
	}
	s.nriLog("StopPodSandbox", rec.ID, s.nri.StopPodSandbox(ctx, nriPod(rec)))
}

func (s *Server) nriRemovePodSandbox(ctx context.Context, rec lifecycle.SandboxRecord) {
	if !s.nri.Active() {
		return
	}
	s.nriLog("RemovePodSandbox", rec.ID, s.nri.RemovePodSandbox(ctx, nriPod(rec)))
}

// nriUpdatePodSandbox hands the pod's new overhead and resources to the
// plugins before they are recorded.
func (s *Server) nriUpdatePodSandbox(ctx context.Context, rec lifecycle.SandboxRecord, overhead, resources *runtime.LinuxContainerResources) error {
	if !s.nri.Active() {
		return nil
	}
	return s.nri.UpdatePodSandbox(ctx, nriPod(rec), nriResources(overhead), nriResources(resources))
}

func (s *Server) nriPostUpdatePodSandbox(ctx context.Context, rec lifecycle.SandboxRecord) {
	if !s.nri.Active() {
		return
	}
	s.nriLog("PostUpdatePodSandbox", rec.ID, s.nri.PostUpdatePodSandbox(ctx, nriPod(rec)))
}

// nriCreateContainer applies the plugins' adjustment to the container's
// spec before it is written; their updates of other containers follow.
func (s *Server) nriCreateContainer(ctx context.Context, sb lifecycle.SandboxRecord, rec lifecycle.ContainerRecord, spec *specs.Spec) error {
	if !s.nri.Active() {
		return nil
	}
	pod, ctr := nriPod(sb), nriContainer(rec, spec)
	adjust, updates, err := s.nri.CreateContainer(ctx, pod, ctr)
	if err == nil {
		err = nri.AdjustSpec(spec, adjust, s.nriInjectCDI)
	}
	if err != nil {
		s.nriUndoCreateContainer(ctx, sb, rec)
		return err
	}
	s.applyNRIUpdatesLater(updates)
	return nil
}

// nriInjectCDI adds the CDI devices a plugin asks for, as those the
// kubelet asks for; with CDI off, a plugin's are refused as the kubelet's.
func (s *Server) nriInjectCDI(spec *specs.Spec, devices []string) error {
	if !s.cfg.CDI.Enabled {
		return fmt.Errorf("%w: a plugin asks for CDI devices %v and cdi.enabled is false", nri.ErrPlugin, devices)
	}
	return s.cdi.Inject(spec, devices)
}

// nriUndoCreateContainer tells the plugins that took a container whose
// create then failed that it is gone.
func (s *Server) nriUndoCreateContainer(ctx context.Context, sb lifecycle.SandboxRecord, rec lifecycle.ContainerRecord) {
	if !s.nri.Active() {
		return
	}
	pod, ctr := nriPod(sb), nriContainer(rec, nil)
	_, err := s.nri.StopContainer(ctx, pod, ctr)
	s.nriLog("StopContainer", rec.ID, err)
	s.nriLog("RemoveContainer", rec.ID, s.nri.RemoveContainer(ctx, pod, ctr))
}

func (s *Server) nriPostCreateContainer(ctx context.Context, rec lifecycle.ContainerRecord) {
	if !s.nri.Active() {
		return
	}
	s.nriLog("PostCreateContainer", rec.ID, s.nri.PostCreateContainer(ctx, s.nriPodOf(rec.SandboxID), nriContainer(rec, nil)))
}

func (s *Server) nriStartContainer(ctx context.Context, rec lifecycle.ContainerRecord) error {
	if !s.nri.Active() {
		return nil
	}
	return s.nri.StartContainer(ctx, s.nriPodOf(rec.SandboxID), nriContainer(rec, nil))
}

func (s *Server) nriPostStartContainer(ctx context.Context, id string) {
	s.nriContainerEvent(ctx, "PostStartContainer", id, s.nri.PostStartContainer)
}

// nriUpdateContainer answers the resources to apply: the kubelet's, as the
// plugins adjusted them.
func (s *Server) nriUpdateContainer(ctx context.Context, rec lifecycle.ContainerRecord, resources *runtime.LinuxContainerResources, annotations map[string]string) (*runtime.LinuxContainerResources, error) {
	if !s.nri.Active() {
		return resources, nil
	}
	ctr := nriContainer(rec, nil)
	ctr.Annotations = withAnnotations(ctr.Annotations, annotations)
	adjusted, others, err := s.nri.UpdateContainer(ctx, s.nriPodOf(rec.SandboxID), ctr, nriResources(resources))
	if err != nil {
		return nil, err
	}
	s.applyNRIUpdatesLater(others)
	return criResources(resources, adjusted), nil
}

// withAnnotations is the container's annotations from its create with those
// of an UpdateContainerResources request over them: plugins see what the
// update says (a resize's own hints), while the record keeps the create's,
// which ContainerStatus reports.
func withAnnotations(created, update map[string]string) map[string]string {
	if len(update) == 0 {
		return created
	}
	out := make(map[string]string, len(created)+len(update))
	maps.Copy(out, created)
	maps.Copy(out, update)
	return out
}

func (s *Server) nriPostUpdateContainer(ctx context.Context, id string) {
	s.nriContainerEvent(ctx, "PostUpdateContainer", id, s.nri.PostUpdateContainer)
}

// nriStopContainer runs once per container, when its exit is recorded:
// stopped by the kubelet, killed with its pod, or exited on its own.
func (s *Server) nriStopContainer(ctx context.Context, id string) {
	s.nriContainerEvent(ctx, "StopContainer", id, func(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
		updates, err := s.nri.StopContainer(ctx, pod, ctr)
		s.applyNRIUpdatesLater(updates)
		return err
	})
}

// nriRemoveContainer runs once the container's record is gone: rec is the
// record as it was.
func (s *Server) nriRemoveContainer(ctx context.Context, rec lifecycle.ContainerRecord) {
	if !s.nri.Active() {
		return
	}
	s.nriLog("RemoveContainer", rec.ID, s.nri.RemoveContainer(ctx, s.nriPodOf(rec.SandboxID), nriContainer(rec, nil)))
}

// nriPodOf is the pod of a container; only its ID once the pod is gone.
func (s *Server) nriPodOf(id string) *api.PodSandbox {
	sb, err := s.sandboxes.Get(id)
	if err != nil {
		return &api.PodSandbox{Id: id}
	}
	return nriPod(sb)
}

// nriContainerEvent relays an event that cannot be refused about a
// container, as its record now stands.
func (s *Server) nriContainerEvent(ctx context.Context, event, id string, relay func(context.Context, *api.PodSandbox, *api.Container) error) {
	if !s.nri.Active() {
		return
	}
	rec, err := s.containers.Get(id)
	if err != nil {
		return
	}
	s.nriLog(event, id, relay(ctx, s.nriPodOf(rec.SandboxID), nriContainer(rec, nil)))
}

func (s *Server) nriLog(event, id string, err error) {
	if err != nil {
		s.log.WithField("id", id).WithField("event", event).WithError(err).Warn("nri: a plugin failed an event it cannot refuse")
	}
}

// nriPod is a sandbox record as NRI shows it to plugins.
func nriPod(r lifecycle.SandboxRecord) *api.PodSandbox {
	pod := &api.PodSandbox{
		Id:             r.ID,
		Name:           r.Metadata.Name,
		Uid:            r.Metadata.UID,
		Namespace:      r.Metadata.Namespace,
		Labels:         r.Labels,
		Annotations:    r.Annotations,
		RuntimeHandler: r.Handler,
		Pid:            uint32(max(r.Infra.PID, 0)),
		Ips:            r.IPs,
		Linux:          &api.LinuxPodSandbox{Namespaces: nriNamespaces(r)},
	}
	if cfg, err := r.DecodeConfig(); err == nil {
		l := cfg.GetLinux()
		pod.Linux.CgroupParent = l.GetCgroupParent()
		pod.Linux.PodOverhead = nriResources(l.GetOverhead())
		pod.Linux.PodResources = nriResources(l.GetResources())
	}
	return pod
}

func nriNamespaces(r lifecycle.SandboxRecord) []*api.LinuxNamespace {
	var out []*api.LinuxNamespace
	for _, ns := range []struct{ typ, path string }{
		{"network", r.Namespaces.Net}, {"uts", r.Namespaces.UTS}, {"ipc", r.Namespaces.IPC}, {"user", r.Namespaces.User},
	} {
		if ns.path != "" {
			out = append(out, &api.LinuxNamespace{Type: ns.typ, Path: ns.path})
		}
	}
	return out
}

// nriContainer is a container record as NRI shows it to plugins; its
// process, mounts and Linux settings come from its spec: the one being made,
// or the bundle's.
func nriContainer(r lifecycle.ContainerRecord, spec *specs.Spec) *api.Container {
	c := &api.Container{
		Id:            r.ID,
		PodSandboxId:  r.SandboxID,
		Name:          r.Metadata.Name,
		State:         nriState(r.State),
		Labels:        r.Labels,
		Annotations:   r.Annotations,
		CreatedAt:     r.CreatedAt,
		StartedAt:     r.StartedAt,
		FinishedAt:    r.FinishedAt,
		ExitCode:      r.ExitCode,
		StatusReason:  r.Reason,
		StatusMessage: r.Message,
		Image:         &api.Image{Name: r.Image},
	}
	if r.State == lifecycle.StateCreated || r.State == lifecycle.StateRunning {
		if pid, ok := bundlePID(r.Bundle); ok {
			c.Pid = uint32(pid)
		}
	}
	if spec == nil {
		var err error
		if spec, err = oci.ReadSpec(r.Bundle); err != nil {
			return c
		}
	}
	if p := spec.Process; p != nil {
		c.Args = p.Args
		c.Env = p.Env
		c.User = &api.User{Uid: p.User.UID, Gid: p.User.GID, AdditionalGids: p.User.AdditionalGids}
		for _, l := range p.Rlimits {
			c.Rlimits = append(c.Rlimits, &api.POSIXRlimit{Type: l.Type, Hard: l.Hard, Soft: l.Soft})
		}
	}
	c.Mounts = api.FromOCIMounts(spec.Mounts)
	c.Hooks = api.FromOCIHooks(spec.Hooks)
	if l := spec.Linux; l != nil {
		c.Linux = &api.LinuxContainer{
			Namespaces:  api.FromOCILinuxNamespaces(l.Namespaces),
			Devices:     api.FromOCILinuxDevices(l.Devices),
			Resources:   api.FromOCILinuxResources(l.Resources, nil),
			CgroupsPath: l.CgroupsPath,
		}
		if p := spec.Process; p != nil && p.OOMScoreAdj != nil {
			c.Linux.OomScoreAdj = api.Int(*p.OOMScoreAdj)
		}
	}
	return c
}

func nriState(s lifecycle.ContainerRecordState) api.ContainerState {
	switch s {
	case lifecycle.StateCreated:
		return api.ContainerState_CONTAINER_CREATED
	case lifecycle.StateRunning:
		return api.ContainerState_CONTAINER_RUNNING
	case lifecycle.StateExited:
		return api.ContainerState_CONTAINER_STOPPED
	default:
		return api.ContainerState_CONTAINER_UNKNOWN
	}
}

// nriResources is the CRI's resources as NRI's.
func nriResources(r *runtime.LinuxContainerResources) *api.LinuxResources {
	if r == nil {
		return nil
	}
	out := &api.LinuxResources{
		Memory: &api.LinuxMemory{},
		Cpu: &api.LinuxCPU{
			Cpus: r.GetCpusetCpus(),
			Mems: r.GetCpusetMems(),
		},
		Unified: r.GetUnified(),
	}
	if v := r.GetMemoryLimitInBytes(); v != 0 {
		out.Memory.Limit = api.Int64(v)
	}
	if v := r.GetMemorySwapLimitInBytes(); v != 0 {
		out.Memory.Swap = api.Int64(v)
	}
	if v := r.GetCpuShares(); v != 0 {
		out.Cpu.Shares = api.UInt64(uint64(v))
	}
	if v := r.GetCpuQuota(); v != 0 {
		out.Cpu.Quota = api.Int64(v)
	}
	if v := r.GetCpuPeriod(); v != 0 {
		out.Cpu.Period = api.UInt64(uint64(v))
	}
	for _, h := range r.GetHugepageLimits() {
		out.HugepageLimits = append(out.HugepageLimits, &api.HugepageLimit{PageSize: h.GetPageSize(), Limit: h.GetLimit()})
	}
	return out
}

// criResources is base with what NRI's resources set: the form in which
// UpdateContainerResources applies and records them.
func criResources(base *runtime.LinuxContainerResources, n *api.LinuxResources) *runtime.LinuxContainerResources {
	out := &runtime.LinuxContainerResources{}
	if base != nil {
		out = proto.Clone(base).(*runtime.LinuxContainerResources)
	}
	if n == nil {
		return out
	}
	if v := n.GetMemory().GetLimit(); v != nil {
		out.MemoryLimitInBytes = v.GetValue()
	}
	if v := n.GetMemory().GetSwap(); v != nil {
		out.MemorySwapLimitInBytes = v.GetValue()
	}
	cpu := n.GetCpu()
	if v := cpu.GetShares(); v != nil {
		out.CpuShares = int64(v.GetValue())
	}
	if v := cpu.GetQuota(); v != nil {
		out.CpuQuota = v.GetValue()
	}
	if v := cpu.GetPeriod(); v != nil {
		out.CpuPeriod = int64(v.GetValue())
	}
	if cpu.GetCpus() != "" {
		out.CpusetCpus = cpu.GetCpus()
	}
	if cpu.GetMems() != "" {
		out.CpusetMems = cpu.GetMems()
	}
	for _, h := range n.GetHugepageLimits() {
		i := slices.IndexFunc(out.HugepageLimits, func(l *runtime.HugepageLimit) bool { return l.GetPageSize() == h.GetPageSize() })
		if i < 0 {
			out.HugepageLimits = append(out.HugepageLimits, &runtime.HugepageLimit{PageSize: h.GetPageSize(), Limit: h.GetLimit()})
		} else {
			out.HugepageLimits[i].Limit = h.GetLimit()
		}
	}
	for k, v := range n.GetUnified() {
		if out.Unified == nil {
			out.Unified = map[string]string{}
		}
		out.Unified[k] = v
	}
	return out
}
