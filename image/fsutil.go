package image

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockFile opens (creating) path and takes a flock on it. Each call opens
// its own file description, so two goroutines of one process exclude each
// other as two processes do. Closing the file releases the lock.
func lockFile(path string, how int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// readCounter reads a decimal counter file; a missing file reads as 0.
func readCounter(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// isMountpoint reports whether dir has something mounted on it: a mount
// has its own device, or at least its own mount ID.
func isMountpoint(dir string) (bool, error) {
	var st, parent unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &st); err != nil {
		return false, err
	}
	if err := unix.Statx(unix.AT_FDCWD, filepath.Dir(dir), unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &parent); err != nil {
		return false, err
	}
	if st.Mask&unix.STATX_MNT_ID != 0 && parent.Mask&unix.STATX_MNT_ID != 0 {
		return st.Mnt_id != parent.Mnt_id, nil
	}
	return st.Dev_major != parent.Dev_major || st.Dev_minor != parent.Dev_minor, nil
}
