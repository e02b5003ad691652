// Package atomicfile replaces files so that a reader, or the next start after
// a crash, sees the old content or the new one, never a mix.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// TempPrefix starts the name of every temp file this package writes, so that
// the owner of a directory can recognise and remove the leftovers of a write
// that a crash cut short (see IsTemp).
const TempPrefix = ".tmp-"

// IsTemp reports whether a directory entry's name is a temp file of an
// unfinished write.
func IsTemp(name string) bool { return strings.HasPrefix(name, TempPrefix) }

// Write replaces path with data durably: write a temp file in the same
// directory, fsync it, rename it over path, fsync the directory. After a
// crash at any moment path holds the old content or the new one.
func Write(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, true)
}

// Replace is Write without the fsyncs, for files that do not outlive a
// reboot anyway (the run dir is a tmpfs): readers still never see a part.
func Replace(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, false)
}

func write(path string, data []byte, perm os.FileMode, durable bool) (retErr error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, TempPrefix+filepath.Base(path)+"-")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if retErr != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	// CreateTemp makes the file 0600; the umask does not apply to Chmod.
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if durable {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("write %s: sync: %w", path, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if !durable {
		return nil
	}
	return SyncDir(dir)
}

// SyncDir makes a create, rename or removal of an entry of dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

// WriteStream is Write for content that fill streams, too large to hold
// (a checkpoint archive). The file is made unnamed (O_TMPFILE) and linked
// at path only once fill succeeded and it is synced, so that neither a
// failure nor a crash leaves a part of it behind; where the file system
// has no unnamed files, a temp file named with TempPrefix stands in.
func WriteStream(path string, perm os.FileMode, fill func(io.Writer) error) (retErr error) {
	dir := filepath.Dir(path)
	f, err := os.OpenFile(dir, os.O_WRONLY|unix.O_TMPFILE|unix.O_CLOEXEC, perm)
	named := false
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) {
		f, err = os.CreateTemp(dir, TempPrefix+filepath.Base(path)+"-")
		named = true
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		_ = f.Close()
		if retErr != nil && named {
			_ = os.Remove(f.Name())
		}
	}()
	if err := fill(f); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: sync: %w", path, err)
	}
	if named {
		if err := os.Rename(f.Name(), path); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		return SyncDir(dir)
	}
	if err := linkUnnamed(f, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return SyncDir(dir)
}

// linkUnnamed gives the O_TMPFILE file f the name path, replacing what is
// there: linkat cannot replace, so a file in the way is replaced by a
// rename of a second, temporary name.
func linkUnnamed(f *os.File, path string) error {
	procPath := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	err := unix.Linkat(unix.AT_FDCWD, procPath, unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	if !errors.Is(err, unix.EEXIST) {
		return err
	}
	for range 8 {
		tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf("%s%s-%d", TempPrefix, filepath.Base(path), rand.Uint32()))
		err := unix.Linkat(unix.AT_FDCWD, procPath, unix.AT_FDCWD, tmp, unix.AT_SYMLINK_FOLLOW)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			_ = os.Remove(tmp)
			return err
		}
		return nil
	}
	return fmt.Errorf("no free temp name beside %s", path)
}
