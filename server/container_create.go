package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/internal/tracing"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/validate"
	"github.com/minicri/minicri/store"
)

// CreateContainer makes a container in a ready sandbox: its root filesystem,
// its OCI bundle, and its monitor, which runs the runtime's create. The
// container then waits for StartContainer.
func (s *Server) CreateContainer(ctx context.Context, req *runtime.CreateContainerRequest) (*runtime.CreateContainerResponse, error) {
	cfg := req.GetConfig()
	if err := validate.ContainerConfig(cfg, hostSELinux()); err != nil {
		return nil, toStatus(err)
	}
	sbID, err := s.resolveSandbox("pod_sandbox_id", req.GetPodSandboxId())
	if err != nil {
		return nil, toStatus(fmt.Errorf("pod sandbox %.80q: %w", req.GetPodSandboxId(), err))
	}
	// A sandbox still being made is not ready: its RunPodSandbox, which
	// holds the sandbox's lock, has not answered (it may be waiting in an
	// NRI plugin's RunPodSandbox hook, which knows the ID). Refused at once
	// rather than waited for, before anything of the container is made.
	pod, err := s.sandboxes.Get(sbID)
	if err != nil {
		return nil, toStatus(err)
	}
	if !lifecycle.Made(pod.State) {
		return nil, toStatus(sandboxNotReady(pod))
	}
	img, err := s.images.Get(cfg.GetImage().GetImage())
	if err != nil {
		return nil, toStatus(fmt.Errorf("image %q of container %s: %w", cfg.GetImage().GetImage(), cfg.GetMetadata().GetName(), err))
	}
	if img.IsArtifact() {
		return nil, toStatus(validate.Invalidf("config.image.image", "%q is an OCI artifact (%s), not a container image: mount it as an image volume (config.mounts.image)", cfg.GetImage().GetImage(), img.ArtifactType))
	}
	// The store is shared by every namespace: an image pulled for another
	// one, or before a policy was in force, is judged by this pod's. Before
	// the sandbox's lock: the judgement may ask a registry.
	if err := s.policy.Admit(ctx, img, requestedName(cfg.GetImage()), pod.Metadata.Namespace); err != nil {
		return nil, toStatus(fmt.Errorf("image %q of container %s: %w", cfg.GetImage().GetImage(), cfg.GetMetadata().GetName(), err))
	}
	// The sandbox's lock keeps it from being stopped or removed under us.
	_, unlockSandbox := s.lockPod(sbID)
	defer unlockSandbox()
	sb, err := s.sandboxes.Get(sbID)
	if err != nil {
		return nil, toStatus(err)
	}
	if sb.State != lifecycle.StateReady {
		return nil, toStatus(sandboxNotReady(sb))
	}
	refs, err := s.resolveRefs(ctx, sbID, cfg)
	if err != nil {
		return nil, toStatus(fmt.Errorf("create container %s: %w", cfg.GetMetadata().GetName(), err))
	}
	defer s.nri.BlockSync()()
	id := lifecycle.NewID()
	name := lifecycle.ContainerName(sbID, cfg.GetMetadata())
	if err := s.containerNames.Reserve(name, id); err != nil {
		var reserved *store.ReservedError
		if errors.As(err, &reserved) {
			return nil, toStatus(markf(store.ErrNameReserved, "container %q (attempt %d) of sandbox %s is already taken by container %s",
				cfg.GetMetadata().GetName(), cfg.GetMetadata().GetAttempt(), sbID, reserved.Owner))
		}
		return nil, toStatus(err)
	}
	// The object comes first: its lock is held before the record is made.
	c := s.containers.Add(id)
	c.lock.Lock()
	defer c.lock.Unlock()
	ctx, phases := lifecycle.WithPhases(ctx, s.metrics, "CreateContainer")
	defer phases.Observe()
	if err := s.createContainer(ctx, c, name, sb, cfg, img, refs); err != nil {
		// The undo deleted it with the record, unless the record was never
		// made or is kept for the start-up repair.
		s.containers.Forget(id)
		s.containerNames.Release(name, id)
		return nil, toStatus(fmt.Errorf("create container %s: %w", cfg.GetMetadata().GetName(), err))
	}
	return &runtime.CreateContainerResponse{ContainerId: id}, nil
}

// imagePolicy judges an image for a container of a namespace's pod.
type imagePolicy interface {
	Admit(ctx context.Context, img image.Image, ref, namespace string) error
}

// requestedName is the name the user asked for, which a namespace's policy
// judges the image under: the kubelet passes the image's ID in image and
// the pod's name for it in user_specified_image.
func requestedName(spec *runtime.ImageSpec) string {
	if ref := spec.GetUserSpecifiedImage(); ref != "" {
		return ref
	}
	return spec.GetImage()
}

// createRefs are what a container joins or is given from outside its pod,
// resolved by CreateContainer before anything is made: a request naming
// what does not exist fails without leaving anything to undo.
type createRefs struct {
	// targetPIDNS is the PID namespace a TARGET container joins; "" when
	// the container does not ask for one.
	targetPIDNS string
	// cdiDevices are the qualified names of the CDI devices to inject.
	cdiDevices []string
}

func (s *Server) resolveRefs(ctx context.Context, sbID string, cfg *runtime.ContainerConfig) (createRefs, error) {
	var refs createRefs
	var err error
	if refs.targetPIDNS, err = s.targetPIDNamespace(ctx, sbID, cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()); err != nil {
		return createRefs{}, err
	}
	if refs.cdiDevices, err = s.resolveCDIDevices(cfg); err != nil {
		return createRefs{}, err
	}
	return refs, nil
}

func (s *Server) createContainer(ctx context.Context, c *container, name string, sb lifecycle.SandboxRecord, cfg *runtime.ContainerConfig, img image.Image, refs createRefs) (retErr error) {
	id := c.id
	sbCfg, err := sb.DecodeConfig()
	if err != nil {
		return err
	}
	if err := validate.ContainerInPod(sbCfg, cfg, kernelUserNamespaces); err != nil {
		return err
	}
	rt, err := s.runtimes.Get(sb.Handler)
	if err != nil {
		return err
	}
	if err := checkHandlerMounts(rt, sb.Handler, cfg); err != nil {
		return err
	}
	vols, err := s.resolveImageVolumes(id, cfg)
	if err != nil {
		return err
	}
	raw, err := proto.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encode config: %w", err)
	}
	rec := lifecycle.ContainerRecord{
		ID:          id,
		Name:        name,
		SandboxID:   sb.ID,
		Metadata:    lifecycle.ContainerMetadata{Name: cfg.GetMetadata().GetName(), Attempt: cfg.GetMetadata().GetAttempt()},
		Labels:      cfg.GetLabels(),
		Annotations: cfg.GetAnnotations(),
		Image:       imageName(img, cfg.GetImage().GetImage()),
		ImageID:     img.ID,
		ImageRef:    imageRef(img),
		CreatedAt:   time.Now().UnixNano(),
		State:       lifecycle.StateCreating,
		LogPath:     containerLogPath(sbCfg, cfg),
		Bundle:      filepath.Join(s.cfg.RunDir, "containers", id),
		Handler:     sb.Handler,
		StopSignal:  stopSignal(cfg, img),
		Config:      raw,

		ImageVolumes: vols,
	}
	// Staged: a crashed machine loses the bundle and the monitor with the
	// run dir, and the sweep of orphans finds the root filesystem. The
	// created write below is the durable one.
	if err := lifecycle.StageFirstRecord(ctx, s.containers, id, rec, "container-after-record"); err != nil {
		return err
	}
	defer s.undoOnFailure(ctx, &retErr, "container", id, func(ctx context.Context) error {
		if rec.CgroupsPath != "" { // the bundle was written: the plugins took it
			s.nriUndoCreateContainer(ctx, sb, rec)
		}
		return s.discardContainer(ctx, rec)
	})
	if err := s.transition(ctx, c, rec, creating); err != nil {
		return err
	}
	monitor, err := s.prepareMonitor(ctx, c, rec, rt, sb, sbCfg, cfg)
	if err != nil {
		return err
	}
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "bundle", Crash: "container-after-bundle"}, func(ctx context.Context) error {
		spec, err := s.writeBundle(ctx, rec, sb, sbCfg, cfg, img, refs)
		if err != nil {
			s.cancelMonitor(c, monitor)
			return err
		}
		rec.CgroupsPath, rec.User = spec.Linux.CgroupsPath, specUser(spec)
		return nil
	}); err != nil {
		return err
	}
	// The runtime's create runs in the monitor: its span is the wait for
	// it. At the crash point a monitor runs that no record names yet.
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "monitor_runtime_create", Crash: "container-after-monitor",
		Span: "runtime.create", Attrs: []attribute.KeyValue{tracing.ContainerID.String(id), tracing.Handler.String(rec.Handler)},
	}, func(ctx context.Context) (err error) {
		rec.Monitor, err = s.finishMonitor(ctx, c, rec, monitor)
		return err
	}); err != nil {
		return err
	}
	rec.State = lifecycle.StateCreated
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "record"}, func(context.Context) error { return s.containers.Put(id, rec) }); err != nil {
		return err
	}
	_ = s.transition(ctx, c, rec, created)
	s.watchContainer(rec)
	return nil
}

// prepareMonitor makes the bundle and log directories and begins the
// container's monitor: a shared monitor's join begins before the bundle is
// written, so that its helper starts and prepares meanwhile, in the bundle
// directory and with the log's, and creates once the bundle is complete.
func (s *Server) prepareMonitor(ctx context.Context, c *container, rec lifecycle.ContainerRecord, rt monitorRuntime, sb lifecycle.SandboxRecord, sbCfg *runtime.PodSandboxConfig, cfg *runtime.ContainerConfig) (*monitorStart, error) {
	if err := os.MkdirAll(rec.Bundle, 0o700); err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	if rec.LogPath != "" {
		if err := os.MkdirAll(filepath.Dir(rec.LogPath), 0o755); err != nil {
			return nil, fmt.Errorf("create log dir: %w", err)
		}
	}
	opts, err := s.monitorOptions(rec, rt, cfg)
	if err != nil {
		return nil, err
	}
	opts.Rootfs, opts.RootfsStage = s.rootfsStageOf(rec.ID, sb, sbCfg)
	opts.SysStage = s.sysStageOf(sb, sbCfg)
	return s.beginMonitor(ctx, c, rec, opts)
}

// writeBundle mounts the container's root filesystem and writes
// config.json into the bundle directory.
func (s *Server) writeBundle(ctx context.Context, rec lifecycle.ContainerRecord, sb lifecycle.SandboxRecord, sbCfg *runtime.PodSandboxConfig, cfg *runtime.ContainerConfig, img image.Image, refs createRefs) (*specs.Spec, error) {
	if err := s.rootfs.PrepareRootfs(rec.ID, img.ID); err != nil {
		return nil, fmt.Errorf("prepare rootfs: %w", err)
	}
	rootfs, err := s.mountRootfs(rec.ID, sb, sbCfg)
	if err != nil {
		return nil, fmt.Errorf("mount rootfs: %w", err)
	}
	volumeSources, err := s.mountImageVolumes(rec.ImageVolumes, cfg)
	if err != nil {
		return nil, err
	}
	cs, err := s.containerSpec(rec.ID, rootfs, sb, sbCfg, cfg, img, refs, volumeSources)
	if err != nil {
		return nil, err
	}
	s.warnMissingControllers(cs.Resources)
	spec, err := oci.GenerateSpec(cs)
	if err != nil {
		return nil, err
	}
	if err := s.cdi.Inject(spec, refs.cdiDevices); err != nil {
		return nil, err
	}
	if err := s.nriCreateContainer(ctx, sb, rec, spec); err != nil {
		return nil, err
	}
	// After NRI: plugins see the rootfs where it is on the host.
	if staged, stage := s.rootfsStageOf(rec.ID, sb, sbCfg); staged != "" {
		if staged != rootfs {
			return nil, fmt.Errorf("rootfs mounted on %s, not on %s where its runtime will look", rootfs, staged)
		}
		spec.Root.Path = stage
	}
	if stage := s.sysStageOf(sb, sbCfg); stage != "" {
		// Not there only when a plugin took it away: plugins are trusted.
		oci.StageHostSys(spec, stage)
	}
	if err := oci.WriteSpec(rec.Bundle, spec); err != nil {
		return nil, err
	}
	return spec, nil
}

func exitFile(rec lifecycle.ContainerRecord) string { return filepath.Join(rec.Bundle, "exit") }

// containerLogPath is where the kubelet wants the container's log: the
// sandbox's log directory joined with the container's relative log path.
func containerLogPath(sbCfg *runtime.PodSandboxConfig, cfg *runtime.ContainerConfig) string {
	if sbCfg.GetLogDirectory() == "" || cfg.GetLogPath() == "" {
		return ""
	}
	return filepath.Join(sbCfg.GetLogDirectory(), cfg.GetLogPath())
}

// imageName is the name the container's status shows: the image's first tag,
// else what the kubelet asked for.
func imageName(img image.Image, requested string) string {
	if len(img.RepoTags) > 0 {
		return img.RepoTags[0]
	}
	return requested
}

// imageRef is the image's repo digest when it has one, else its ID.
func imageRef(img image.Image) string {
	if len(img.RepoDigests) > 0 {
		return img.RepoDigests[0]
	}
	return img.ID
}

// discardContainer removes everything a container has, its record and its
// object: the undo of a failed create and the end of a removal. Each step
// is idempotent.
func (s *Server) discardContainer(ctx context.Context, rec lifecycle.ContainerRecord) error {
	var errs []error
	if rt, err := s.runtimes.Get(rec.Handler); err == nil {
		if err := deleteFromRuntime(ctx, rt, rec); err != nil {
			errs = append(errs, fmt.Errorf("delete from runtime: %w", err))
		}
	}
	lifecycle.PhaseDone(ctx, "container_runtime_delete")
	// The monitor writes its exit file into the bundle once the container
	// is gone; removing the bundle under it could fail or leave that file.
	s.waitMonitorDone(rec)
	s.releaseMonitor(s.ctr(rec.ID))
	lifecycle.PhaseDone(ctx, "container_monitor")
	if err := s.rootfs.RemoveRootfs(rec.ID); err != nil {
		errs = append(errs, fmt.Errorf("remove rootfs: %w", err))
	}
	if err := s.removeImageVolumes(rec.ImageVolumes); err != nil {
		errs = append(errs, err)
	}
	lifecycle.PhaseDone(ctx, "container_rootfs")
	if err := os.RemoveAll(rec.Bundle); err != nil {
		errs = append(errs, fmt.Errorf("remove bundle: %w", err))
	}
	lifecycle.PhaseDone(ctx, "container_bundle")
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	lifecycle.CrashPoint("container-discard-before-record-delete")
	err := s.containers.Delete(rec.ID) // and the object with it
	lifecycle.PhaseDone(ctx, "container_record")
	return err
}

// deleteFromRuntime removes the container from its runtime. One whose exit
// is recorded is deleted without --force: runc's forced delete signals the
// container and then sleeps before it looks whether it is gone, even when
// nothing ran, while its plain delete of a stopped container removes it at
// once (and kills what is left in the cgroup of a container that shared
// its PID namespace). Should the runtime still see the container running,
// the forced delete follows, so a removal never stops at that.
func deleteFromRuntime(ctx context.Context, rt containerRuntime, rec lifecycle.ContainerRecord) error {
	cgroup := containerCgroup(rec)
	if rec.State == lifecycle.StateExited {
		if err := rt.Delete(ctx, rec.ID, false, cgroup); err == nil {
			return nil
		}
	}
	return rt.Delete(ctx, rec.ID, true, cgroup)
}

// containerCgroup is the cgroup minicri's spec gave the container: the
// record's, or, for a create cut short before the record had it, the
// bundle's config.json, which is written before the runtime starts.
func containerCgroup(rec lifecycle.ContainerRecord) string {
	if rec.CgroupsPath != "" {
		return rec.CgroupsPath
	}
	return bundleCgroup(rec.Bundle)
}

// bundleCgroup is the cgroup named in the spec of a bundle minicri wrote;
// "" when there is none.
func bundleCgroup(bundle string) string {
	spec, err := oci.ReadSpec(bundle)
	if err != nil || spec.Linux == nil {
		return ""
	}
	return spec.Linux.CgroupsPath
}

// waitMonitorDone waits, for killGrace at most, until the container's
// monitor is done with it. A monitor whose container was deleted finishes
// it at once.
func (s *Server) waitMonitorDone(rec lifecycle.ContainerRecord) {
	// By the socket, not the record: a create cut short by a crash has
	// a monitor that no record names.
	done := make(chan struct{})
	if err := s.monitor.WatchContainer(rec.Bundle, func() { close(done) }); err != nil {
		return
	}
	if !waitClosed(context.Background(), done, killGrace) {
		s.log.WithField("monitor", rec.Monitor.PID).Warn("container monitor still serving the container after it was deleted")
	}
}

// targetPIDNamespace is the PID namespace a container with PID mode TARGET
// joins (what `kubectl debug --target` asks for): that of the target
// container's init, as containerd does. The target must be in the same pod
// and running, as containerd checks. When the target's init exits, the
// kernel kills every process of its namespace, the joining container's too:
// a debug container does not outlive what it debugs.
func (s *Server) targetPIDNamespace(ctx context.Context, sbID string, o *runtime.NamespaceOption) (string, error) {
	if o.GetPid() != runtime.NamespaceMode_TARGET {
		return "", nil
	}
	const field = "config.linux.security_context.namespace_options.target_id"
	id, err := s.resolveContainer(field, o.GetTargetId())
	if err != nil {
		return "", fmt.Errorf("%s: target container: %w", field, err)
	}
	target, err := s.containers.Get(id)
	if err != nil {
		return "", fmt.Errorf("%s: target container %q: %w", field, o.GetTargetId(), err)
	}
	if target.SandboxID != sbID {
		return "", validate.Invalidf(field, "container %s is in pod %s, not in pod %s", target.ID, target.SandboxID, sbID)
	}
	if target.State != lifecycle.StateRunning {
		return "", fmt.Errorf("%s: target container %s is %s: %w", field, target.ID, target.State, errNotRunning)
	}
	rt, err := s.runtimes.Get(target.Handler)
	if err != nil {
		return "", err
	}
	// The runtime's state, not the pid file: the runtime checks that the
	// pid still is the container's init, not a process that reused it.
	st, err := rt.State(ctx, target.ID)
	if errors.Is(err, oci.ErrNotFound) || err == nil && (st.Status != oci.StatusRunning || st.Pid <= 0) {
		return "", fmt.Errorf("%s: target container %s has no running init: %w", field, target.ID, errNotRunning)
	}
	if err != nil {
		return "", fmt.Errorf("%s: state of target container %s: %w", field, target.ID, err)
	}
	return fmt.Sprintf("/proc/%d/ns/pid", st.Pid), nil
}
