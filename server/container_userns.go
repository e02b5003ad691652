package server

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/validate"
)

// A container of a pod with a user namespace of its own
// (podsandbox.Controller pins it) finds its rootfs idmapped into that
// namespace, on a stage no host user reaches.

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
