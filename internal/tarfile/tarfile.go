// Package tarfile adds files to tar streams from directories whose content
// someone else controls (a container's upper dir, CRIU's output): without
// following a link, opening nothing but a regular file.
package tarfile

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// AddRegular writes hdr (its Size set here, its ModTime when zero) and the content of the regular
// file at path, as large as it was when opened (a log may grow meanwhile).
// A link, fifo or device at path is refused, never followed or opened for
// long (O_NONBLOCK); with listed set, so is a file other than the one listed.
func AddRegular(tw *tar.Writer, path string, hdr *tar.Header, listed fs.FileInfo) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	if listed != nil && !os.SameFile(fi, listed) {
		return fmt.Errorf("%s: replaced while read", path)
	}
	hdr.Size = fi.Size()
	if hdr.ModTime.IsZero() {
		hdr.ModTime = fi.ModTime()
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
