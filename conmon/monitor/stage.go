package monitor

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/osthread"
)

// runCreateRuntime runs the runtime's create. A container whose bundle
// names a rootfs stage (wire.Config.Rootfs) is created in a mount
// namespace of a throwaway thread of the monitor, where the rootfs is
// bind-mounted on the stage: runc's init resolves root.path as the
// container's root, which for a user-namespaced pod is a host uid that can
// search no directory of the state root, but can reach the stage, an empty
// directory of the host below world-searchable ones. The container's mount
// namespace is a copy of this one, so it keeps its rootfs; the namespace
// itself ends with the thread. Nothing of it is seen on the host, where
// the stage stays empty and the rootfs stays behind the state root's 0700
// directories.
func (m *monitor) runCreateRuntime(argv []string, files [3]int) (unix.WaitStatus, error) {
	if m.cfg.Rootfs == "" {
		return m.runRuntime(argv, files)
	}
	var status unix.WaitStatus
	err := osthread.Throwaway(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return errors.New("rootfs stage: mount namespace: " + err.Error())
		}
		// Slave: the host's mounts still reach the container, as in a
		// runtime's create run in the host's namespace (a user-namespaced
		// container's mounts are slaves of the host's anyway), and the
		// bind below reaches no one.
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
			return errors.New("rootfs stage: make mounts slaves: " + err.Error())
		}
		if err := unix.Mount(m.cfg.Rootfs, m.cfg.RootfsStage, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return errors.New("rootfs stage: bind " + m.cfg.Rootfs + " on " + m.cfg.RootfsStage + ": " + err.Error())
		}
		if m.cfg.SysStage != "" {
			if err := stageHostSys(m.cfg.SysStage); err != nil {
				return err
			}
		}
		var err error
		status, err = m.runRuntime(argv, files)
		return err
	})
	return status, err
}

// stageHostSys binds the host's /sys on stage for a user-namespaced
// container on the host's network, which cannot mount a sysfs of its own:
// the sysfs alone, without the mounts below it (the host's cgroup tree,
// securityfs, debugfs), and read-only. Made here, in a mount namespace of
// the initial user namespace, the bind is copied into the container's
// namespace, which its user namespace owns, locked: the kernel lets the
// container's root neither clear its read-only flag nor unmount it to see
// what it covers, and the runtime's bind of it inherits both locks. A bind
// the runtime made of the host's /sys itself, in the container's own
// namespace, would lock neither, and would carry the mounts below /sys
// along under the runtime's /sys/fs/cgroup.
func stageHostSys(stage string) error {
	if err := unix.Mount("/sys", stage, "", unix.MS_BIND, ""); err != nil {
		return errors.New("sys stage: bind /sys on " + stage + ": " + err.Error())
	}
	const flags = unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := unix.Mount("", stage, "", flags, ""); err != nil {
		return errors.New("sys stage: make " + stage + " read-only: " + err.Error())
	}
	return nil
}
