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
		var err error
		status, err = m.runRuntime(argv, files)
		return err
	})
	return status, err
}
