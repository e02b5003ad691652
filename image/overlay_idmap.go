package image

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/kernelfeat"
	"github.com/minicri/minicri/internal/osthread"
)

// IDMap places a rootfs in a user namespace: the pinned namespace file and
// the host IDs its root (ID 0 inside) maps to.
type IDMap struct {
	UserNS  string
	RootUID int
	RootGID int
}

// MountRootfsIDMapped is MountRootfs for a container in a user namespace:
// the image's files, owned by root on disk, appear owned by the namespace's
// root, without a chown of any layer (layers stay shared with every other
// pod). Each lower dir is an idmapped clone of the layer (mount_setattr
// MOUNT_ATTR_IDMAP with the namespace); the upper dir's root is owned by
// the namespace's root, and what the container writes lands there with its
// host IDs.
func (s *Store) MountRootfsIDMapped(id string, idmap IDMap) (string, error) {
	return s.mountRootfs(id, &idmap)
}

// mountOverlayIDMapped needs idmapped mounts of the layers' filesystem
// (ext4, xfs, btrfs, tmpfs ...) and overlay over idmapped layers (Linux
// 5.19). Overlay takes a lower dir only by a path in the caller's mount
// namespace (not a detached clone), so the clones are attached in a
// private mount namespace of a throwaway thread, on a tmpfs there: the
// host never sees them, and they go with that namespace when the thread
// ends, crash or not. The overlay is made there and moved onto target in
// the host's namespace; it keeps its own private clones of the layers.
func mountOverlayIDMapped(lowers []string, upper, work, target string, idmap IDMap) error {
	if err := os.Lchown(upper, idmap.RootUID, idmap.RootGID); err != nil {
		return fmt.Errorf("chown upper dir to the user namespace's root: %w", err)
	}
	lowerdirPlus := kernelfeat.OverlayLowerdirPlus.Supported() // probed off the private thread
	return osthread.PrivateMountNS(func(hostNS int) error {
		mfd, err := makeIDMappedOverlay(lowers, upper, work, target, idmap.UserNS, lowerdirPlus)
		if err != nil {
			return err
		}
		defer unix.Close(mfd)
		if err := unix.Setns(hostNS, unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("return to the host's mount namespace: %w", err)
		}
		if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("move mount overlay to %s: %w", target, err)
		}
		return nil
	})
}

// makeIDMappedOverlay runs in the private mount namespace and returns the
// detached overlay mount. scratch (target, in this namespace only) holds
// the idmapped clones.
func makeIDMappedOverlay(lowers []string, upper, work, scratch, userns string, lowerdirPlus bool) (int, error) {
	usernsFD, err := unix.Open(userns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open user namespace: %w", err)
	}
	defer unix.Close(usernsFD)
	if err := unix.Mount("tmpfs", scratch, "tmpfs", 0, "mode=0700"); err != nil {
		return -1, fmt.Errorf("scratch tmpfs for idmapped layers: %w", err)
	}
	mapped := make([]string, len(lowers))
	for i, dir := range lowers {
		mapped[i] = strconv.Itoa(i) // relative to scratch
		if err := attachIDMapped(dir, filepath.Join(scratch, mapped[i]), usernsFD); err != nil {
			return -1, err
		}
	}
	// This thread has a working directory of its own (a new mount
	// namespace implies it): the classic mount's lower dirs are "0:1:…".
	if err := unix.Chdir(scratch); err != nil {
		return -1, err
	}
	if !lowerdirPlus {
		return mountIDMappedOverlayLegacy(mapped, upper, work, scratch)
	}
	fd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fd)
	for i, dir := range mapped {
		if err := unix.FsconfigSetString(fd, "lowerdir+", filepath.Join(scratch, dir)); err != nil {
			return -1, fmt.Errorf("overlay idmapped lower dir %s: %w%s", lowers[i], err, fsLog(fd))
		}
	}
	for _, opt := range [][2]string{{"upperdir", upper}, {"workdir", work}} {
		if err := unix.FsconfigSetString(fd, opt[0], opt[1]); err != nil {
			return -1, fmt.Errorf("overlay %s=%s: %w%s", opt[0], opt[1], err, fsLog(fd))
		}
	}
	_ = unix.FsconfigSetString(fd, "index", "off") // as in mountOverlayFsconfig
	if err := unix.FsconfigCreate(fd); err != nil {
		return -1, fmt.Errorf("overlay create: %w%s", err, fsLog(fd))
	}
	// nodev: the overlay lives in the host's user namespace, so a device
	// node an image ships would open as the host's device, for the pod
	// (whose /dev is the runtime's own tmpfs). Not nosuid: su and ping
	// inside the pod need their setuid bits, which give no more than the
	// pod's own IDs; host users cannot reach the rootfs: no directory of
	// the store lets them search it, and the pod's runtime finds it on a
	// stage of its own mount namespace (server/container_userns.go).
	mfd, err := unix.Fsmount(fd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("fsmount overlay: %w%s", err, fsLog(fd))
	}
	return mfd, nil
}

// mountIDMappedOverlayLegacy is the classic mount(2) for kernels without
// "lowerdir+" (before 6.8): mounted on scratch/merged in the private
// namespace, and returned as a detached clone for the host, like the
// fsmount one. nodev as there.
func mountIDMappedOverlayLegacy(lowers []string, upper, work, scratch string) (int, error) {
	data, err := legacyOverlayOptions(lowers, upper, work)
	if err != nil {
		return -1, err
	}
	merged := filepath.Join(scratch, "merged")
	if err := os.Mkdir(merged, 0o700); err != nil {
		return -1, err
	}
	if err := unix.Mount("overlay", merged, "overlay", unix.MS_NODEV, data); err != nil {
		return -1, fmt.Errorf("mount overlay over idmapped layers: %w", err)
	}
	mfd, err := unix.OpenTree(unix.AT_FDCWD, merged, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("clone overlay mount: %w", err)
	}
	return mfd, nil
}

// attachIDMapped mounts an idmapped clone of dir's mount on a new dir at
// target.
func attachIDMapped(dir, target string, usernsFD int) error {
	if err := os.Mkdir(target, 0o700); err != nil {
		return err
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("clone mount of %s: %w", dir, err)
	}
	defer unix.Close(tree)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(usernsFD)}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("idmap mount of %s: %w", dir, err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach idmapped %s: %w", dir, err)
	}
	return nil
}
