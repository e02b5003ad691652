package podsandbox

import (
	"context"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// Slice is the systemd slice of a pod: its cgroup parent's, or
// system.slice without one (as CgroupsPath does for its containers).
func Slice(cfg *runtime.PodSandboxConfig) (string, error) {
	parent := cfg.GetLinux().GetCgroupParent()
	if parent == "" {
		return "system.slice", nil
	}
	return oci.SystemdSlice(parent)
}

// infraLeavesDaemonCgroup puts a pod's infra process, started in this call,
// in minicri-pause-<pod ID>.scope in the pod's slice, where the kubelet
// counts the pod (containerd's pause container is there too).
func (c *Controller) infraLeavesDaemonCgroup(ctx context.Context, rec lifecycle.SandboxRecord, cfg *runtime.PodSandboxConfig) {
	if !c.opts.Systemd || rec.Infra.PID <= 0 {
		return
	}
	slice, err := Slice(cfg)
	if err != nil {
		c.deps.Log.WithError(err).WithField("pod", rec.ID).Warn("the pod's infra process stays in the daemon's cgroup")
		return
	}
	c.deps.ToScope(ctx, rec.Infra.PID, rec.Infra.StartTime, infraScope(rec.ID), slice, "infra process of pod "+rec.ID)
}

// infraScope is the scope of a pod's infra process.
func infraScope(podID string) string { return "minicri-pause-" + podID + ".scope" }
