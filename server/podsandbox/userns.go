package podsandbox

import (
	"context"
	"fmt"
	"path/filepath"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// pinUserNamespace gives a pod with userns_options mode POD its user
// namespace, with the kubelet's mappings, and its network, IPC and UTS
// namespaces, owned by that user namespace (network.PinProcessNamespaces
// says why). An infra process makes them all at once and they are pinned
// from it; it stays as the pod's infra when the containers share its PID
// namespace, else it is stopped. A hostNetwork pod (KEP-5607) keeps the
// host's network and UTS namespaces: its containers join no pinned ones
// (the server's containerNamespaces) and see the host's /sys
// (oci.sysMount). The server's validatePodUserNamespace has refused the
// host's IPC and PID namespaces for such a pod.
func (c *Controller) pinUserNamespace(r *lifecycle.SandboxRecord, u *runtime.UserNamespace, cfg *runtime.PodSandboxConfig, opts conmon.PauseOptions) error {
	hostNet := HostNetwork(cfg)
	infra, err := conmon.StartPauseInUserNS(c.opts.MonitorPath, r.Dir, conmonIDMaps(u.GetUids()), conmonIDMaps(u.GetGids()), opts, hostNet)
	if err != nil {
		return fmt.Errorf("start the pod's user namespace: %w", err)
	}
	lifecycle.CrashPoint("sandbox-userns-unrecorded") // found again only by its pod dir's record
	// Recorded before anything else is made: a failure (or a crash) from
	// here on stops it with the sandbox.
	r.Infra = infra
	if err := c.deps.Records.Put(r.ID, *r); err != nil {
		return err
	}
	kinds := []network.NamespaceKind{network.NamespaceUser, network.NamespaceIPC}
	hostname := ""
	if !hostNet {
		kinds = append(kinds, network.NamespaceNet, network.NamespaceUTS)
		hostname = Hostname(cfg)
	}
	ns, err := network.PinProcessNamespaces(filepath.Join(r.Dir, "ns"), infra.PID, kinds, hostname)
	if err != nil {
		return fmt.Errorf("pin namespaces: %w", err)
	}
	r.Namespaces = ns
	// The pins name the process by its PID: still the same process (same
	// start time) afterwards means they hold its namespaces, not those of
	// a process that took over a recycled PID.
	if !conmon.Alive(infra.PID, infra.StartTime) {
		return fmt.Errorf("pin namespaces: the pod's infra process %d ended before its namespaces were pinned", infra.PID)
	}
	lifecycle.CrashPoint("sandbox-userns-pinned") // the infra may be unrecorded as gone
	return nil
}

// dropUnsharedInfra stops the infra process that made a pod's user
// namespace when its containers do not share its PID namespace: the pins
// keep the namespaces alive.
func (c *Controller) dropUnsharedInfra(ctx context.Context, r *lifecycle.SandboxRecord, cfg *runtime.PodSandboxConfig) error {
	if sharesPIDNamespace(cfg) || r.Infra.PID <= 0 {
		return nil
	}
	if err := conmon.StopPause(ctx, r.Infra); err != nil {
		return err
	}
	r.Infra = conmon.Infra{}
	return nil
}

func conmonIDMaps(maps []*runtime.IDMapping) []conmon.IDMap {
	out := make([]conmon.IDMap, 0, len(maps))
	for _, m := range maps {
		out = append(out, conmon.IDMap{ContainerID: int(m.GetContainerId()), HostID: int(m.GetHostId()), Size: int(m.GetLength())})
	}
	return out
}
