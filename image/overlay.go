package image

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Overlay mounts. The classic mount(2) takes all options in one page
// (4 KiB), which a hundred layer paths overflow. Kernels from 6.8 take each
// lower dir on its own ("lowerdir+" through fsconfig), which has no such
// limit; older kernels get the classic mount with short symlinks (l/<12 hex
// digits of the chain ID>) in place of the layer paths.

// forceLegacyMount makes mountOverlay skip the new mount API (tests).
var forceLegacyMount = false

// errNoLowerdirPlus: the kernel's overlay does not know "lowerdir+".
var errNoLowerdirPlus = errors.New(`overlay does not support "lowerdir+"`)

// shortLinkLen is how many hex digits of a chain ID name its short link.
const shortLinkLen = 12

// layerDir is the unpacked layer of a chain ID ("sha256:<hex>").
func (s *Store) layerDir(chainID string) string {
	return s.path(layersDir, strings.TrimPrefix(chainID, "sha256:"))
}

// mountOverlay mounts lowers (top first) under upper at target. With no
// upper dir (upper == "") the overlay is an image volume: read-only,
// nosuid and nodev, as the container gets it (ociMounts).
func (s *Store) mountOverlay(lowers []string, upper, work, target string) error {
	if !forceLegacyMount {
		err := mountOverlayFsconfig(lowers, upper, work, target)
		if !errors.Is(err, errNoLowerdirPlus) && !errors.Is(err, unix.ENOSYS) {
			return err
		}
	}
	short, err := s.shortLinks(lowers)
	if err != nil {
		return err
	}
	return mountOverlayLegacy(short, upper, work, target)
}

func mountOverlayFsconfig(lowers []string, upper, work, target string) error {
	fd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fd)
	for i, dir := range lowers {
		if err := unix.FsconfigSetString(fd, "lowerdir+", dir); err != nil {
			if i == 0 && errors.Is(err, unix.EINVAL) {
				return errNoLowerdirPlus
			}
			return fmt.Errorf("overlay lower dir %s: %w%s", dir, err, fsLog(fd))
		}
	}
	for _, opt := range [][2]string{{"upperdir", upper}, {"workdir", work}} {
		if opt[1] == "" {
			continue
		}
		if err := unix.FsconfigSetString(fd, opt[0], opt[1]); err != nil {
			return fmt.Errorf("overlay %s=%s: %w%s", opt[0], opt[1], err, fsLog(fd))
		}
	}
	// The inode index would tie the layers to this upper dir's first mount;
	// layers are shared by many rootfses, so it stays off (as in Docker).
	_ = unix.FsconfigSetString(fd, "index", "off")
	if err := unix.FsconfigCreate(fd); err != nil {
		return fmt.Errorf("overlay create: %w%s", err, fsLog(fd))
	}
	var attrs int
	if upper == "" {
		attrs = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	}
	mfd, err := unix.Fsmount(fd, unix.FSMOUNT_CLOEXEC, attrs)
	if err != nil {
		return fmt.Errorf("fsmount overlay: %w%s", err, fsLog(fd))
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move mount overlay to %s: %w", target, err)
	}
	return nil
}

// fsLog reads the messages the kernel left on an fs context ("e overlay: …").
func fsLog(fd int) string {
	var msgs []string
	buf := make([]byte, 1024)
	for range 16 {
		n, err := unix.Read(fd, buf)
		if err != nil || n <= 0 {
			break
		}
		msgs = append(msgs, strings.TrimSpace(string(buf[:n])))
	}
	if len(msgs) == 0 {
		return ""
	}
	return " (" + strings.Join(msgs, "; ") + ")"
}

func mountOverlayLegacy(lowers []string, upper, work, target string) error {
	data := "lowerdir=" + strings.Join(lowers, ":") + ",index=off"
	var flags uintptr
	if upper != "" {
		data += ",upperdir=" + upper + ",workdir=" + work
	} else {
		flags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV
	}
	if len(data) >= os.Getpagesize() {
		return fmt.Errorf("overlay: %d layers need %d bytes of mount options, the kernel takes %d (a kernel of 6.8 or later has no such limit)",
			len(lowers), len(data), os.Getpagesize()-1)
	}
	if err := unix.Mount("overlay", target, "overlay", flags, data); err != nil {
		return fmt.Errorf("mount overlay on %s: %w", target, err)
	}
	return nil
}

// shortLinks returns, for each layer dir, a short symlink to it in l/. A
// link name already taken by another layer (a prefix collision) keeps the
// long path for that layer.
func (s *Store) shortLinks(dirs []string) ([]string, error) {
	out := make([]string, len(dirs))
	for i, dir := range dirs {
		out[i] = dir
		hex := filepath.Base(dir)
		if filepath.Dir(dir) != s.path(layersDir) || len(hex) < shortLinkLen {
			continue
		}
		link := s.path(linksDir, hex[:shortLinkLen])
		target := filepath.Join("..", layersDir, hex)
		err := os.Symlink(target, link)
		if errors.Is(err, os.ErrExist) {
			if got, _ := os.Readlink(link); got != target {
				continue
			}
			err = nil
		}
		if err != nil {
			return nil, fmt.Errorf("short link for layer %s: %w", hex, err)
		}
		out[i] = link
	}
	return out, nil
}
