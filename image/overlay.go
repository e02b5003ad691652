package image

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/kernelfeat"
	"github.com/minicri/minicri/internal/osthread"
)

// Overlay mounts. The classic mount(2) takes all options in one page
// (4 KiB), which a hundred absolute layer paths overflow. Kernels from 6.8
// take each lower dir on its own ("lowerdir+" through fsconfig), which has
// no such limit; whether this kernel does is asked of kernelfeat, which
// creates such an overlay once (before 6.5 the key is accepted and only the
// create fails, so trying the key tells nothing). Older kernels get the
// classic mount with short relative links (l/<12 hex digits of the chain
// ID>) in place of the layer paths, mounted from a thread whose working
// directory is the store's root (as containerd does): 15 bytes a layer,
// room for some 250.

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
	if kernelfeat.OverlayLowerdirPlus.Supported() {
		return mountOverlayFsconfig(lowers, upper, work, target)
	}
	short, err := s.shortLinks(lowers)
	if err != nil {
		return err
	}
	return mountOverlayLegacy(s.root, short, upper, work, target)
}

func mountOverlayFsconfig(lowers []string, upper, work, target string) error {
	fd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fd)
	for _, dir := range lowers {
		if err := unix.FsconfigSetString(fd, "lowerdir+", dir); err != nil {
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

// mountOverlayLegacy mounts with mount(2), from a thread whose working
// directory is dir: lowers may be relative to it (the short links).
func mountOverlayLegacy(dir string, lowers []string, upper, work, target string) error {
	var flags uintptr
	if upper == "" {
		flags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV
	}
	data, err := legacyOverlayOptions(lowers, upper, work)
	if err != nil {
		return err
	}
	return osthread.Throwaway(func() error {
		// A working directory of this thread's own: the daemon's other
		// threads keep theirs.
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return fmt.Errorf("overlay mount: own working directory: %w", err)
		}
		if err := unix.Chdir(dir); err != nil {
			return fmt.Errorf("overlay mount: %w", err)
		}
		if err := unix.Mount("overlay", target, "overlay", flags, data); err != nil {
			return fmt.Errorf("mount overlay on %s: %w", target, err)
		}
		return nil
	})
}

// legacyOverlayOptions is mount(2)'s option string for an overlay, or an
// error when it does not fit in the page the kernel copies.
func legacyOverlayOptions(lowers []string, upper, work string) (string, error) {
	data := "lowerdir=" + strings.Join(lowers, ":") + ",index=off"
	if upper != "" {
		data += ",upperdir=" + upper + ",workdir=" + work
	}
	if len(data) >= os.Getpagesize() {
		return "", fmt.Errorf("overlay: %d layers need %d bytes of mount options, the kernel takes %d (a kernel of 6.8 or later has no such limit)",
			len(lowers), len(data), os.Getpagesize()-1)
	}
	return data, nil
}

// shortLinks returns, for each layer dir, a short symlink to it in l/,
// relative to the store's root. A link name already taken by another layer
// (a prefix collision) keeps the long absolute path for that layer.
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
		out[i] = filepath.Join(linksDir, hex[:shortLinkLen]) // relative to the store's root
	}
	return out, nil
}
