package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/network"
)

// pinUserNamespace gives a pod with userns_options mode POD its user
// namespace, with the kubelet's mappings, and its network, IPC and UTS
// namespaces, owned by that user namespace (network.PinProcessNamespaces
// says why). An infra process makes them all at once and they are pinned
// from it; it stays as the pod's infra when the containers share its PID
// namespace, else it is stopped. validatePodUserNamespace has refused the
// host's network, IPC and PID namespaces for such a pod.
func (s *Server) pinUserNamespace(r *sandboxRecord, u *runtime.UserNamespace, hostname string, opts conmon.PauseOptions) error {
	infra, err := conmon.StartPauseInUserNS(s.monitorPath, r.Dir, conmonIDMaps(u.GetUids()), conmonIDMaps(u.GetGids()), opts)
	if err != nil {
		return fmt.Errorf("start the pod's user namespace: %w", err)
	}
	crashPoint("sandbox-userns-unrecorded") // found again only by its command line
	// Recorded before anything else is made: a failure (or a crash) from
	// here on stops it with the sandbox.
	r.Infra = infra
	if err := s.sandboxes.Put(r.ID, *r); err != nil {
		return err
	}
	kinds := []network.NamespaceKind{network.NamespaceUser, network.NamespaceNet, network.NamespaceIPC, network.NamespaceUTS}
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
	crashPoint("sandbox-userns-pinned") // the infra may be unrecorded as gone
	return nil
}

// dropUnsharedInfra stops the infra process that made a pod's user
// namespace when its containers do not share its PID namespace: the pins
// keep the namespaces alive.
func (s *Server) dropUnsharedInfra(ctx context.Context, r *sandboxRecord, cfg *runtime.PodSandboxConfig) error {
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

// rootfsIDMap is how a container's rootfs is mounted in its pod's user
// namespace, or nil for a pod in the host's: the host IDs the pod's root
// maps to own the rootfs's upper dir.
func rootfsIDMap(sb sandboxRecord, sbCfg *runtime.PodSandboxConfig) (*image.IDMap, error) {
	u := podUserNamespace(sbCfg)
	if u == nil || sb.Namespaces.User == "" {
		return nil, nil
	}
	uid, ok := hostIDOf(0, u.GetUids())
	if !ok {
		return nil, invalidf("config.linux.security_context.namespace_options.userns_options.uids", "does not map the pod's root (ID 0)")
	}
	gid, ok := hostIDOf(0, u.GetGids())
	if !ok {
		return nil, invalidf("config.linux.security_context.namespace_options.userns_options.gids", "does not map the pod's root (ID 0)")
	}
	return &image.IDMap{UserNS: sb.Namespaces.User, RootUID: int(uid), RootGID: int(gid)}, nil
}

// hostIDOf maps an ID of the namespace to the host's.
func hostIDOf(id uint32, maps []*runtime.IDMapping) (uint32, bool) {
	for _, m := range maps {
		if id >= m.GetContainerId() && uint64(id) < uint64(m.GetContainerId())+uint64(m.GetLength()) {
			return m.GetHostId() + (id - m.GetContainerId()), true
		}
	}
	return 0, false
}

// mountRootfs mounts a container's rootfs, idmapped into its pod's user
// namespace when the pod has one of its own.
func (s *Server) mountRootfs(id string, sb sandboxRecord, sbCfg *runtime.PodSandboxConfig) (string, error) {
	idmap, err := rootfsIDMap(sb, sbCfg)
	if err != nil {
		return "", err
	}
	if idmap == nil {
		return s.mounts.MountRootfs(id)
	}
	return s.mounts.MountRootfsIDMapped(id, *idmap)
}

// errHandlerUnavailable: the handler is configured but its runtime binary
// is not there (runc-current before make deps built it). The node may get
// it later, so it is the node's state, not a malformed request.
var errHandlerUnavailable = errors.New("runtime handler unavailable")

// checkHandlerAvailable refuses a pod on a handler whose runtime binary is
// missing at once, with the config key to fix, rather than at its first
// container. A PATH lookup or a stat, as Status does.
func (s *Server) checkHandlerAvailable(handler string) error {
	rt, err := s.runtimes.Get(handler)
	if err != nil {
		return invalidf("runtime_handler", "%v", err)
	}
	if err := rt.Available(); err != nil {
		return fmt.Errorf("%w: %q: %v (runtime.handlers.%s.path)", errHandlerUnavailable, handler, err, handler)
	}
	return nil
}
