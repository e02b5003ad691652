package conmon

import (
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
// the containers' supplementary groups there.
func StartPauseInUserNS(binary, podDir string, uids, gids []IDMap) (Infra, error) {
	attr := &syscall.SysProcAttr{
		Setsid:                     true,
		Cloneflags:                 unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
		UidMappings:                sysProcIDMaps(uids),
		GidMappings:                sysProcIDMaps(gids),
		GidMappingsEnableSetgroups: true,
	}
	return startPause(binary, podDir, attr)
}

func sysProcIDMaps(maps []IDMap) []syscall.SysProcIDMap {
	out := make([]syscall.SysProcIDMap, 0, len(maps))
	for _, m := range maps {
		out = append(out, syscall.SysProcIDMap{ContainerID: m.ContainerID, HostID: m.HostID, Size: m.Size})
	}
	return out
}
