package podsandbox

import (
	"context"
	"path/filepath"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// Repair is the start-up repair of one sandbox record, before the first
// call is served: a sandbox whose create was cut short is rolled back with
// its containers; a ready one that lost a namespace, its network or its
// infra process (a reboot, a crash during a stop or a removal) is recorded
// not ready. attached are the pods CNI holds an attachment for, nil when
// they could not be listed. Each step is idempotent, so a crash during the
// repair is repaired by the next start.
func (c *Controller) Repair(ctx context.Context, sb lifecycle.SandboxRecord, attached map[string]bool) {
	log := c.deps.Log.WithField("pod", sb.ID)
	if sb.State == lifecycle.StateCreating {
		log.Info("rolling back a sandbox whose create was cut short")
		c.deps.Metrics.Repaired("sandbox_create_rolled_back")
		c.deps.Containers.Discard(ctx, sb.ID)
		if err := c.remove(ctx, &sb); err != nil {
			log.WithError(err).Warn("roll back sandbox")
		}
		return
	}
	if sb.State != lifecycle.StateReady {
		return
	}
	why := sandboxLoss(sb, attached)
	if why == "" {
		return
	}
	// The kubelet stops and removes a sandbox that is not ready, and makes
	// a new one; a ready one it would keep using, broken.
	log.WithField("lost", why).Warn("sandbox lost part of itself while the daemon was down; it is not ready")
	c.deps.Metrics.Repaired("sandbox_marked_not_ready")
	_, err := c.deps.Records.Observe(sb.ID, func(r *lifecycle.SandboxRecord) error {
		r.State = lifecycle.StateNotReady
		return nil
	})
	if err != nil {
		log.WithError(err).Warn("record sandbox not ready")
	}
}

// sandboxLoss says what a ready sandbox no longer has, or "" when it is
// whole. attached is nil when the CNI attachments could not be listed.
func sandboxLoss(sb lifecycle.SandboxRecord, attached map[string]bool) string {
	for _, pin := range []string{sb.Namespaces.Net, sb.Namespaces.IPC, sb.Namespaces.UTS, sb.Namespaces.User} {
		if pin != "" && !network.NamespacePinned(pin) {
			return "namespace " + filepath.Base(pin) + " is no longer pinned"
		}
	}
	if sb.NetworkUp && attached != nil && !attached[sb.ID] {
		return "its pod network was torn down"
	}
	if sb.Infra.PID > 0 && !conmon.Alive(sb.Infra.PID, sb.Infra.StartTime) {
		return "its infra process (the pod's PID namespace) is gone"
	}
	return ""
}

// RemoveOrphan removes what the pod dir of sandbox id holds (pins, shm,
// infra process) and the dir itself, for a pod dir that no record names:
// the leftovers of a lost or corrupt record, found by the start-up sweep.
func (c *Controller) RemoveOrphan(ctx context.Context, id string) error {
	rec := lifecycle.SandboxRecord{ID: id, Dir: c.podDir(id)}
	return c.remove(ctx, &rec)
}

// StopStrayInfra stops the infra process that the pod dir of sandbox id
// names (conmon.RecordedInfra) but its record does not: a crash between
// starting one and recording it in the sandbox leaves one that only its
// pod dir names. A process is stopped only while it is the one recorded
// (same pid and start time): nothing a pod or a host user can name or make
// is looked at. It says whether it stopped one.
func (c *Controller) StopStrayInfra(ctx context.Context, id string) (bool, error) {
	var keep conmon.Infra
	if rec, err := c.deps.Records.Get(id); err == nil {
		keep = rec.Infra
	}
	return stopRecordedInfra(ctx, c.podDir(id), keep)
}

// stopRecordedInfra stops the infra process recorded in podDir unless it
// is keep or has ended, and says whether it stopped one.
func stopRecordedInfra(ctx context.Context, podDir string, keep conmon.Infra) (bool, error) {
	if podDir == "" {
		return false, nil
	}
	in, err := conmon.RecordedInfra(podDir)
	if err != nil || in.PID <= 0 || in == keep || !conmon.Alive(in.PID, in.StartTime) {
		return false, err
	}
	return true, conmon.StopPause(ctx, in)
}
