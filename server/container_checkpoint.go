package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/validate"
)

// containerCheckpointer is what a checkpoint needs of a container's OCI
// runtime (*oci.Runtime): freeze it, dump it with CRIU, thaw it.
type containerCheckpointer interface {
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	Checkpoint(ctx context.Context, id, imagesDir, workDir string) error
}

// rootfsDiffer writes what a container changed in its root filesystem
// (*image.Store).
type rootfsDiffer interface {
	WriteRootfsDiff(id string, w io.Writer, skip []string) (deleted []string, err error)
}

// criuProbe says whether CRIU works on this node (*oci.CRIU).
type criuProbe interface {
	Check() oci.CRIUStatus
}

// checkCRIU is the CRIU check's answer; a server made without one (a test's)
// has no CRIU.
func (s *Server) checkCRIU() oci.CRIUStatus {
	if s.criu == nil {
		return oci.CRIUStatus{Err: fmt.Errorf("%w: no CRIU check configured", oci.ErrNoCheckpoint)}
	}
	return s.criu.Check()
}

// checkpointsDir, under the state root, stages the checkpoints (one
// directory per container, CRIU's probe beside them). Nothing in it
// outlives the call that made it; start-up removes what a crash left.
const checkpointsDir = "checkpoints"

// The annotations containerd gives every container's spec, which
// checkpointctl reads from spec.dump to name the container, its pod and
// namespace. minicri adds them to the spec.dump of its archives only.
const (
	annContainerType    = "io.kubernetes.cri.container-type"
	annContainerName    = "io.kubernetes.cri.container-name"
	annImageName        = "io.kubernetes.cri.image-name"
	annSandboxID        = "io.kubernetes.cri.sandbox-id"
	annSandboxName      = "io.kubernetes.cri.sandbox-name"
	annSandboxNamespace = "io.kubernetes.cri.sandbox-namespace"
	annSandboxUID       = "io.kubernetes.cri.sandbox-uid"
)

// CheckpointContainer writes a checkpoint of a running container to the
// tar archive the request names (the kubelet's forensic checkpoint, KEP
// 2008): CRIU's images of its processes, which go on running, its spec and
// config, and what it changed in its root filesystem, in the layout of
// containerd and cri-o that checkpointctl reads. The container is paused
// meanwhile, so that its files match its memory. A node whose CRIU is
// missing or does not work is FailedPrecondition, an archive that would
// pass runtime.checkpoint_max_bytes ResourceExhausted, and a failure
// leaves neither a part of the archive nor the staging directory.
func (s *Server) CheckpointContainer(ctx context.Context, req *runtime.CheckpointContainerRequest) (*runtime.CheckpointContainerResponse, error) {
	location, err := checkpointLocation(req.GetLocation())
	if err != nil {
		return nil, toStatus(err)
	}
	if req.GetTimeout() < 0 {
		return nil, toStatus(validate.Invalidf("timeout", "must not be negative (%d)", req.GetTimeout()))
	}
	if t := req.GetTimeout(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Second)
		defer cancel()
	}
	rec, unlock, err := s.lockContainer(req.GetContainerId())
	if err != nil {
		return nil, toStatus(err)
	}
	defer unlock()
	if rec.State != lifecycle.StateRunning {
		return nil, toStatus(markf(errWrongState, "container %s is %s: only a running container can be checkpointed", rec.ID, rec.State))
	}
	if st := s.checkCRIU(); st.Err != nil {
		return nil, toStatus(fmt.Errorf("checkpoint container %s: %w", rec.ID, st.Err))
	}
	start := time.Now()
	if err := s.checkpoint(ctx, rec, location); err != nil {
		return nil, toStatus(fmt.Errorf("checkpoint container %s: %w", rec.ID, err))
	}
	s.log.WithField("container", rec.ID).WithField("archive", location).
		WithField("took", time.Since(start).Round(time.Millisecond).String()).Info("checkpoint written")
	return &runtime.CheckpointContainerResponse{}, nil
}

// checkpointLocation checks the archive's path: absolute, in a directory
// that exists, and not a directory itself. An archive there is replaced.
func checkpointLocation(location string) (string, error) {
	if location == "" {
		return "", validate.Invalidf("location", "required: the path of the archive to write")
	}
	if !filepath.IsAbs(location) {
		return "", validate.Invalidf("location", "%q is not an absolute path", location)
	}
	location = filepath.Clean(location)
	dir, err := os.Stat(filepath.Dir(location))
	if err != nil || !dir.IsDir() {
		return "", validate.Invalidf("location", "directory %s of the archive does not exist", filepath.Dir(location))
	}
	if fi, err := os.Lstat(location); err == nil && fi.IsDir() {
		return "", validate.Invalidf("location", "%s is a directory", location)
	}
	return location, nil
}

// checkpoint stages the archive's parts under the state root, then writes
// the archive. The caller holds the container's lock.
func (s *Server) checkpoint(ctx context.Context, rec lifecycle.ContainerRecord, location string) (retErr error) {
	rt, err := s.runtimes.Get(rec.Handler)
	if err != nil {
		return err
	}
	spec, err := oci.ReadSpec(rec.Bundle)
	if err != nil {
		return err
	}
	stage := filepath.Join(s.cfg.Root, checkpointsDir, rec.ID)
	if err := os.RemoveAll(stage); err != nil { // a crash's, or a killed call's
		return err
	}
	if err := os.MkdirAll(filepath.Join(stage, oci.CheckpointImagesDir), 0o700); err != nil {
		return err
	}
	defer func() {
		if err := os.RemoveAll(stage); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("remove the staging dir: %w", err))
		}
	}()
	deleted, err := s.dumpPaused(ctx, rt, rec, spec, stage)
	if err != nil {
		return err
	}
	sb, err := s.sandboxes.Get(rec.SandboxID)
	if err != nil {
		return fmt.Errorf("its pod %s: %w", rec.SandboxID, err)
	}
	cfg, err := rec.DecodeConfig()
	if err != nil {
		return err
	}
	config := oci.CheckpointConfig{
		ID:              rec.ID,
		Name:            rec.Metadata.Name,
		RootfsImage:     rec.Image,
		RootfsImageRef:  rec.ImageRef,
		RootfsImageName: rec.Image,
		OCIRuntime:      rec.Handler,
		CreatedTime:     time.Unix(0, rec.CreatedAt),
		CheckpointedAt:  time.Now(),
	}
	if config.OCIRuntime == "" {
		config.OCIRuntime = s.cfg.Runtime.DefaultHandler
	}
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	for k, v := range map[string]string{
		annContainerType: "container", annContainerName: rec.Metadata.Name, annImageName: rec.Image,
		annSandboxID: sb.ID, annSandboxName: sb.Metadata.Name, annSandboxNamespace: sb.Metadata.Namespace, annSandboxUID: sb.Metadata.UID,
	} {
		spec.Annotations[k] = v
	}
	if err := oci.WriteCheckpointFiles(stage, config, spec, containerStatus(rec, cfg), deleted); err != nil {
		return err
	}
	return oci.WriteCheckpointArchive(ctx, location, stage, rec.LogPath, s.cfg.Runtime.CheckpointMaxBytes)
}

// dumpPaused freezes the container, dumps its processes and writes its
// rootfs diff into the stage dir, and thaws it whatever happened: a
// container is never left frozen, even when the call's deadline passed.
func (s *Server) dumpPaused(ctx context.Context, rt containerCheckpointer, rec lifecycle.ContainerRecord, spec *specs.Spec, stage string) (deleted []string, retErr error) {
	if err := rt.Pause(ctx, rec.ID); err != nil {
		return nil, fmt.Errorf("pause: %w", err)
	}
	defer func() {
		if err := rt.Resume(context.WithoutCancel(ctx), rec.ID); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("resume: %w", err))
		}
	}()
	if err := rt.Checkpoint(ctx, rec.ID, filepath.Join(stage, oci.CheckpointImagesDir), stage); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(stage, oci.CheckpointRootfsDiff), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	skip := make([]string, 0, len(spec.Mounts))
	for _, m := range spec.Mounts {
		skip = append(skip, m.Destination)
	}
	// Bounded here too: the staged diff takes the state root's disk.
	deleted, err = s.diffs.WriteRootfsDiff(rec.ID, oci.BoundWriter(f, s.cfg.Runtime.CheckpointMaxBytes), skip)
	if err != nil {
		return nil, err
	}
	return deleted, f.Close()
}
