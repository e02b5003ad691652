package podsandbox

import (
	"context"
	"fmt"
	"os"

	"github.com/minicri/minicri/server/internal/lifecycle"
)

// Remove removes the pod's containers (forcibly when running), its
// resources, its record and its object. rec is its record, read under the
// sandbox's lock; Remove answers it as it was last, for the events of the
// removal. The caller releases the pod's name.
func (c *Controller) Remove(ctx context.Context, rec lifecycle.SandboxRecord) (lifecycle.SandboxRecord, error) {
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "containers", Crash: "sandbox-remove-after-containers"}, func(ctx context.Context) error { return c.deps.Containers.Remove(ctx, rec.ID) }); err != nil {
		return rec, err
	}
	err := c.remove(ctx, &rec)
	return rec, err
}

// remove removes everything of a sandbox, its record and its object: the
// undo of a failed Run, the end of Remove, and the start-up repair of a
// cut-short Run or of an orphaned pod dir.
func (c *Controller) remove(ctx context.Context, rec *lifecycle.SandboxRecord) error {
	if err := c.release(ctx, rec); err != nil {
		return err
	}
	lifecycle.CrashPoint("sandbox-remove-after-release")
	if err := lifecycle.Step(ctx, lifecycle.StepOf{Phase: "files"}, func(context.Context) error {
		if err := os.RemoveAll(rec.Dir); err != nil {
			return fmt.Errorf("remove pod dir: %w", err)
		}
		return nil
	}); err != nil {
		return err
	}
	// And the object with it.
	return lifecycle.Step(ctx, lifecycle.StepOf{Phase: "record"}, func(context.Context) error { return c.deps.Records.Delete(rec.ID) })
}
