package conmon

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// IDMap is one range of a user namespace's uid_map or gid_map.
type IDMap struct {
	ContainerID, HostID, Size int
}

// StartPauseInUserNS starts the infra process of a pod with a user
// namespace of its own: in a new user namespace with the given mappings,
// and in new PID, network, IPC and UTS namespaces, which that user namespace
// owns. The caller pins the namespaces from /proc/PID/ns and keeps the
// process as the pod's infra when its containers share its PID namespace,
// else stops it. setgroups stays allowed in the namespace: the runtime sets
// the containers' supplementary groups there. The process runs as uid and
// gid 65535 of the namespace, so both maps must hold that ID (the
// kubelet's hold 0-65535).
func StartPauseInUserNS(binary, podDir string, uids, gids []IDMap, opts PauseOptions) (Infra, error) {
	if err := mapsPauseID(uids, gids); err != nil {
		return Infra{}, err
	}
	attr := &syscall.SysProcAttr{
		Setsid:                     true,
		Cloneflags:                 unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
		UidMappings:                sysProcIDMaps(uids),
		GidMappings:                sysProcIDMaps(gids),
		GidMappingsEnableSetgroups: true,
		// Root of the namespace: the clone keeps the daemon's host uid 0,
		// which the namespace does not map, and an unmapped uid execs
		// without capabilities there, too few for the confinement (and
		// the owner of the host's root files).
		Credential: &syscall.Credential{Uid: 0, Gid: 0},
	}
	return startPause(binary, podDir, opts, attr)
}

// PauseID is the uid and gid the infra process runs as (cmd/minicri-pause),
// the kubelet pause image's.
const PauseID = 65535

// ErrPauseIDUnmapped: a pod's user namespace mappings leave out PauseID. A
// malformed request: the kubelet's map 0-65535.
var ErrPauseIDUnmapped = fmt.Errorf("user namespace mappings without ID %d, which the pod's infra process runs as", PauseID)

// mapsPauseID refuses mappings under which the infra process could not
// take its unprivileged IDs: it would stay root of the namespace.
func mapsPauseID(uids, gids []IDMap) error {
	for _, set := range []struct {
		name string
		maps []IDMap
	}{{"uid", uids}, {"gid", gids}} {
		if !mapsID(set.maps, PauseID) {
			return fmt.Errorf("%w: the %s mappings", ErrPauseIDUnmapped, set.name)
		}
	}
	return nil
}

func mapsID(maps []IDMap, id int) bool {
	for _, m := range maps {
		if id >= m.ContainerID && id < m.ContainerID+m.Size {
			return true
		}
	}
	return false
}

func sysProcIDMaps(maps []IDMap) []syscall.SysProcIDMap {
	out := make([]syscall.SysProcIDMap, 0, len(maps))
	for _, m := range maps {
		out = append(out, syscall.SysProcIDMap{ContainerID: m.ContainerID, HostID: m.HostID, Size: m.Size})
	}
	return out
}
