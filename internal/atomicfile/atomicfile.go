// Package atomicfile replaces files so that a reader, or the next start after
// a crash, sees the old content or the new one, never a mix.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
