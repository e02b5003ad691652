package kernelfeat

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/osthread"
)

// OverlayLowerdirPlus: overlayfs takes its lower dirs one by one
// ("lowerdir+" through fsconfig, Linux 6.8), which has no limit on their
// number or length. Before 6.5 overlayfs accepts the key and fails at
// create; from 6.5 to 6.7 it refuses the key. Found by creating an overlay
// of two lower dirs given that way.
var OverlayLowerdirPlus = newFeature("overlayLowerdirPlus", probeOverlayLowerdirPlus)

// IDMappedTmpfs: a tmpfs mount can be idmapped (mount_setattr with
// MOUNT_ATTR_IDMAP, Linux 6.3). A pod in a user namespace of its own needs
// it: its /dev/shm and the kubelet's projected volumes (the service account
// token) are tmpfs mounts the runtime idmaps into the namespace. Found by
// idmapping a clone of a scratch tmpfs.
var IDMappedTmpfs = newFeature("idmappedTmpfs", probeIDMappedTmpfs)

// IDMappedOverlay: an overlay can be made over idmapped clones of dirs on
// the filesystem of the image layers (SetLayerDir), as a rootfs for a pod
// in a user namespace is: idmapped mounts of that filesystem (ext4 and xfs
// 5.12, btrfs 5.15, tmpfs 6.3) and overlay over idmapped lower layers
// (5.19). Found by making one, read-only, over two scratch dirs there.
var IDMappedOverlay = newFeature("idmappedOverlay", func() error { return probeIDMappedOverlay(layerDir()) })

// RecursiveReadOnly: a mount and every mount below it can be made
// read-only at once (mount_setattr with MOUNT_ATTR_RDONLY and AT_RECURSIVE,
// Linux 5.12), as a runtime does for the "rro" mount option. runc lists rro
// in its features whatever the kernel; before 5.12 a container with such a
// mount would fail at create. Found by doing it to a scratch tmpfs with
// another below it.
var RecursiveReadOnly = newFeature("recursiveReadOnly", probeRecursiveReadOnly)

var (
	layerDirMu sync.Mutex
	layerDirV  string
)

// SetLayerDir names a directory on the filesystem that holds the image
// layers; the IDMappedOverlay probe makes its scratch dirs there (and
// removes them). Set it before the first question; unset, the probe uses
// the temporary directory.
func SetLayerDir(dir string) {
	layerDirMu.Lock()
	defer layerDirMu.Unlock()
	layerDirV = dir
}

func layerDir() string {
	layerDirMu.Lock()
	defer layerDirMu.Unlock()
	if layerDirV == "" {
		return os.TempDir()
	}
	return layerDirV
}

func probeOverlayLowerdirPlus() error {
	return onScratchTmpfs(func(dir string) error {
		lowers, err := mkdirs(dir, "a", "b")
		if err != nil {
			return err
		}
		fd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
		if err != nil {
			return fmt.Errorf("fsopen overlay: %w", err)
		}
		defer unix.Close(fd)
		for _, l := range lowers {
			if err := unix.FsconfigSetString(fd, "lowerdir+", l); err != nil {
				return fmt.Errorf(`overlay "lowerdir+": %w`, err)
			}
		}
		if err := unix.FsconfigCreate(fd); err != nil {
			return fmt.Errorf(`overlay create with "lowerdir+": %w`, err)
		}
		return nil
	})
}

func probeRecursiveReadOnly() error {
	return onScratchTmpfs(func(dir string) error {
		below := filepath.Join(dir, "below")
		if err := os.Mkdir(below, 0o700); err != nil {
			return cannotProbe("%v", err)
		}
		if err := unix.Mount("tmpfs", below, "tmpfs", 0, "mode=0700"); err != nil {
			return cannotProbe("scratch tmpfs: %v", err)
		}
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		if err := unix.MountSetattr(unix.AT_FDCWD, dir, unix.AT_RECURSIVE, attr); err != nil {
			return fmt.Errorf("mount_setattr (MOUNT_ATTR_RDONLY, AT_RECURSIVE): %w", err)
		}
		var st unix.Statfs_t
		if err := unix.Statfs(below, &st); err != nil {
			return cannotProbe("statfs: %v", err)
		}
		if st.Flags&unix.ST_RDONLY == 0 {
			return fmt.Errorf("mount_setattr (MOUNT_ATTR_RDONLY, AT_RECURSIVE) left the mount below writable")
		}
		return nil
	})
}

func probeIDMappedTmpfs() error {
	return withUserNS(func(userns int) error {
		return onScratchTmpfs(func(dir string) error {
			tree, err := idmappedClone(dir, userns)
			if err != nil {
				return fmt.Errorf("tmpfs: %w", err)
			}
			unix.Close(tree)
			return nil
		})
	})
}

func probeIDMappedOverlay(parent string) error {
	return withUserNS(func(userns int) error {
		base, err := os.MkdirTemp(parent, ".minicri-probe-")
		if err != nil {
			return cannotProbe("scratch dir: %v", err)
		}
		defer os.RemoveAll(base)
		lowers, err := mkdirs(base, "a", "b")
		if err != nil {
			return err
		}
		return onScratchTmpfs(func(scratch string) error {
			mapped := make([]string, len(lowers))
			for i, l := range lowers {
				tree, err := idmappedClone(l, userns)
				if err != nil {
					return fmt.Errorf("the layers' filesystem: %w", err)
				}
				mapped[i] = filepath.Join(scratch, strconv.Itoa(i))
				err = os.Mkdir(mapped[i], 0o700)
				if err == nil {
					err = unix.MoveMount(tree, "", unix.AT_FDCWD, mapped[i], unix.MOVE_MOUNT_F_EMPTY_PATH)
				}
				unix.Close(tree)
				if err != nil {
					return cannotProbe("attach idmapped clone: %v", err)
				}
			}
			target := filepath.Join(scratch, "merged")
			if err := os.Mkdir(target, 0o700); err != nil {
				return cannotProbe("%v", err)
			}
			data := "lowerdir=" + mapped[0] + ":" + mapped[1]
			if err := unix.Mount("overlay", target, "overlay", unix.MS_RDONLY, data); err != nil {
				return fmt.Errorf("overlay over idmapped lower dirs: %w", err)
			}
			return nil
		})
	})
}

// idmappedClone clones the mount at dir (detached) and idmaps it into
// userns. The kernel's refusal is returned as is.
func idmappedClone(dir string, userns int) (int, error) {
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("clone mount: %w", err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, attr); err != nil {
		unix.Close(tree)
		return -1, fmt.Errorf("idmapped mount (MOUNT_ATTR_IDMAP): %w", err)
	}
	return tree, nil
}

func mkdirs(parent string, names ...string) ([]string, error) {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = filepath.Join(parent, n)
		if err := os.Mkdir(out[i], 0o755); err != nil {
			return nil, cannotProbe("%v", err)
		}
	}
	return out, nil
}

// onScratchTmpfs runs fn with a fresh tmpfs at dir, mounted only in a
// private mount namespace of a throwaway thread: the host sees an empty
// directory, removed afterwards, and no mount.
func onScratchTmpfs(fn func(dir string) error) error {
	dir, err := os.MkdirTemp("", "minicri-probe-")
	if err != nil {
		return cannotProbe("scratch dir: %v", err)
	}
	defer os.Remove(dir)
	return osthread.PrivateMountNS(func(int) error {
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0700"); err != nil {
			return cannotProbe("scratch tmpfs: %v", err)
		}
		return fn(dir)
	})
}

// probeHostID is the one host ID the probes' user namespace maps (to its
// root); nothing runs as it.
const probeHostID = 65534

// withUserNS runs fn with an fd of a new user namespace. A multi-threaded
// process cannot unshare one, so a child is made in it: this binary again,
// traced, so that it stops at its exec before running anything, and killed
// once the namespace is open.
func withUserNS(fn func(userns int) error) error {
	// The tracer is a thread; it must also be the one that kills and
	// reaps the child.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: probeHostID, Size: 1}}
	cmd := exec.Command("/proc/self/exe")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER,
		UidMappings: m,
		GidMappings: m,
		Ptrace:      true,
		Pdeathsig:   unix.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return cannotProbe("a process in a new user namespace: %v", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	fd, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return cannotProbe("open the new user namespace: %v", err)
	}
	defer unix.Close(fd)
	return fn(fd)
}
