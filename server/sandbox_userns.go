package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/validate"
)

// pinUserNamespace gives a pod with userns_options mode POD its user
// namespace, with the kubelet's mappings, and its network, IPC and UTS
// namespaces, owned by that user namespace (network.PinProcessNamespaces
// says why). An infra process makes them all at once and they are pinned
// from it; it stays as the pod's infra when the containers share its PID
// namespace, else it is stopped. A hostNetwork pod (KEP-5607) keeps the
// host's network and UTS namespaces: its containers join no pinned ones
// (containerNamespaces) and see the host's /sys (oci.sysMount).
// validatePodUserNamespace has refused the host's IPC and PID namespaces
// for such a pod.
func (s *Server) pinUserNamespace(r *lifecycle.SandboxRecord, u *runtime.UserNamespace, cfg *runtime.PodSandboxConfig, opts conmon.PauseOptions) error {
	hostNet := hostNetwork(cfg)
	infra, err := conmon.StartPauseInUserNS(s.monitorPath, r.Dir, conmonIDMaps(u.GetUids()), conmonIDMaps(u.GetGids()), opts, hostNet)
	if err != nil {
		return fmt.Errorf("start the pod's user namespace: %w", err)
	}
	lifecycle.CrashPoint("sandbox-userns-unrecorded") // found again only by its pod dir's record
	// Recorded before anything else is made: a failure (or a crash) from
	// here on stops it with the sandbox.
	r.Infra = infra
	if err := s.sandboxes.Put(r.ID, *r); err != nil {
		return err
	}
	kinds := []network.NamespaceKind{network.NamespaceUser, network.NamespaceIPC}
	hostname := ""
	if !hostNet {
		kinds = append(kinds, network.NamespaceNet, network.NamespaceUTS)
		hostname = podHostname(cfg)
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
func (s *Server) dropUnsharedInfra(ctx context.Context, r *lifecycle.SandboxRecord, cfg *runtime.PodSandboxConfig) error {
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
func rootfsIDMap(sb lifecycle.SandboxRecord, sbCfg *runtime.PodSandboxConfig) (*image.IDMap, error) {
	u := validate.PodUserNamespace(sbCfg)
	if u == nil || sb.Namespaces.User == "" {
		return nil, nil
	}
	uid, ok := hostIDOf(0, u.GetUids())
	if !ok {
		return nil, validate.Invalidf("config.linux.security_context.namespace_options.userns_options.uids", "does not map the pod's root (ID 0)")
	}
	gid, ok := hostIDOf(0, u.GetGids())
	if !ok {
		return nil, validate.Invalidf("config.linux.security_context.namespace_options.userns_options.gids", "does not map the pod's root (ID 0)")
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
func (s *Server) mountRootfs(id string, sb lifecycle.SandboxRecord, sbCfg *runtime.PodSandboxConfig) (string, error) {
	idmap, err := rootfsIDMap(sb, sbCfg)
	if err != nil {
		return "", err
	}
	if idmap == nil {
		return s.mounts.MountRootfs(id)
	}
	return s.mounts.MountRootfsIDMapped(id, *idmap)
}

// A user-namespaced container's runtime resolves the bundle's root.path as
// the pod's root: a host uid, maybe that of a host user (cri-tools maps
// container 0 to host 1000), that must search no directory of the state
// root. So the bundle names the rootfs stage, an empty directory beside the
// run dir (0700, below the run dir's world-searchable parent, as /run is),
// and the monitor runs the runtime's create in a mount namespace of its own
// in which the container's rootfs is bind-mounted on the stage
// (conmon/monitor/stage.go). Whatever host uid a pod maps to reaches none
// of its files: on the host, the stage is empty and the rootfs is behind
// the state root's 0700 directories.

// rootfsStageDir is the rootfs stage of a daemon with run dir runDir.
func rootfsStageDir(runDir string) string { return filepath.Clean(runDir) + "-rootfs" }

// The same pod's containers on the host's network find the host's /sys on
// the sys stage, beside the rootfs stage: the monitor binds the host's
// sysfs there, alone and read-only, in the same mount namespace, so that
// it arrives in the container locked (conmon/monitor/stage.go). On the
// host the sys stage stays empty too.

// sysStageDir is the sys stage of a daemon with run dir runDir.
func sysStageDir(runDir string) string { return filepath.Clean(runDir) + "-sys" }

// makeStage makes a stage, or makes it private again: 0700, with
// nothing in it.
func makeStage(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("stage: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("stage %s: not a directory", dir)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	return nil
}

// unsearchableAbove names the first directory above dir that others may
// not search, or "" when every one may: a pod's root could not reach the
// stage below it, and its containers would fail in the runtime's create.
func unsearchableAbove(dir string) string {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm()&0o001 == 0 {
			return p
		}
		if p == "/" {
			return ""
		}
	}
}

// rootfsStageOf is where the runtime's create of container id finds its
// rootfs: on the stage for a pod with a user namespace of its own (both
// empty for any other), as rootfsIDMap decides the idmapped mount.
func (s *Server) rootfsStageOf(id string, sb lifecycle.SandboxRecord, sbCfg *runtime.PodSandboxConfig) (rootfs, stage string) {
	if validate.PodUserNamespace(sbCfg) == nil || sb.Namespaces.User == "" {
		return "", ""
	}
	return s.mounts.RootfsPath(id), s.rootfsStage
}

// sysStageOf is where the runtime's create of a container of pod sb finds
// the host's /sys: on the sys stage for a pod with a user namespace of its
// own on the host's network (oci.StageHostSys), else "". The pod's
// record decides, as it decides the container's namespaces
// (containerNamespaces): no pinned network namespace is the host's.
func (s *Server) sysStageOf(sb lifecycle.SandboxRecord, sbCfg *runtime.PodSandboxConfig) string {
	if validate.PodUserNamespace(sbCfg) == nil || sb.Namespaces.User == "" || sb.Namespaces.Net != "" {
		return ""
	}
	return s.sysStage
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
		return validate.Invalidf("runtime_handler", "%v", err)
	}
	if err := rt.Available(); err != nil {
		return fmt.Errorf("%w: %q: %v (runtime.handlers.%s.path)", errHandlerUnavailable, handler, err, handler)
	}
	return nil
}
