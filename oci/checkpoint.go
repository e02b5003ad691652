package oci

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/minicri/minicri/internal/tracing"
)

// Pause freezes every process of the container (the cgroup freezer).
func (r *Runtime) Pause(ctx context.Context, id string) (err error) {
	ctx, span := r.span(ctx, "runtime.pause", id)
	defer func() { tracing.End(span, err) }()
	_, err = r.run(ctx, nil, "pause", id, "pause", id)
	return err
}

// Resume thaws a container that Pause froze.
func (r *Runtime) Resume(ctx context.Context, id string) (err error) {
	ctx, span := r.span(ctx, "runtime.resume", id)
	defer func() { tracing.End(span, err) }()
	_, err = r.run(ctx, nil, "resume", id, "resume", id)
	return err
}

// Checkpoint dumps the container's processes with CRIU (`runtime
// checkpoint --leave-running`): their images go to imagesDir, CRIU's
// dump.log and stats-dump to workDir, and the processes go on running
// (still frozen if Pause froze them). File locks are dumped, as cri-o
// asks; established TCP connections and unix sockets to outside the
// container are not (CRIU then refuses the dump), as with cri-o and
// containerd. A failure carries CRIU's own errors from dump.log.
func (r *Runtime) Checkpoint(ctx context.Context, id, imagesDir, workDir string) (err error) {
	ctx, span := r.span(ctx, "runtime.checkpoint", id)
	defer func() { tracing.End(span, err) }()
	_, err = r.run(ctx, nil, "checkpoint", id, "checkpoint", "--leave-running", "--file-locks",
		"--image-path", imagesDir, "--work-path", workDir, id)
	if err == nil {
		return nil
	}
	if logged := criuLogErrors(filepath.Join(workDir, CheckpointDumpLog)); logged != "" {
		return fmt.Errorf("%w (CRIU: %s)", err, logged)
	}
	return err
}
