package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/tarfile"
)

// WriteRootfsDiff writes to w what container rootfs id changed in its
// root filesystem: a tar of its upper dir's entries (the files, links,
// devices and directories it added or changed), and returns the paths it
// deleted, absolute in the container: one per whiteout, and for a
// directory it made opaque (deleted, then made again) each entry of the
// layers below that the directory hides. This is a checkpoint archive's
// rootfs-diff.tar and deleted.files: a restore unpacks the tar over the
// image, then removes the deleted paths. Entries at or below a path in
// skip (the container's mount points, whose content the container sees
// from elsewhere) are left out.
//
// The upper dir is the container's to fill: it is read from the host side
// without following a link, only regular files are opened (never a fifo
// or a device), and a file is copied as large as it was when opened.
// Pause the container first for a diff that matches its processes.
func (s *Store) WriteRootfsDiff(id string, w io.Writer, skip []string) (deleted []string, err error) {
	if err := validRootfsID(id); err != nil {
		return nil, err
	}
	rec, err := s.readRootfsRecord(id)
	if err != nil {
		return nil, err
	}
	if rec.ReadOnly {
		return nil, fmt.Errorf("rootfs %s is an image volume: it has no upper dir", id)
	}
	d := rootfsDiff{upper: s.upperDir(id), lowers: s.lowerDirs(rec), tw: tar.NewWriter(w), skip: map[string]bool{}}
	for _, p := range skip {
		d.skip[path.Clean("/"+p)] = true
	}
	if err := filepath.WalkDir(d.upper, d.add); err != nil {
		return nil, fmt.Errorf("rootfs %s diff: %w", id, err)
	}
	if err := d.tw.Close(); err != nil {
		return nil, fmt.Errorf("rootfs %s diff: %w", id, err)
	}
	return d.deleted, nil
}

type rootfsDiff struct {
	upper   string
	lowers  []string // top first
	tw      *tar.Writer
	skip    map[string]bool
	deleted []string
}

func (d *rootfsDiff) add(p string, entry fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(d.upper, p)
	if err != nil || rel == "." {
		return err
	}
	inCtr := "/" + filepath.ToSlash(rel)
	if d.skip[inCtr] {
		if entry.IsDir() {
			return filepath.SkipDir
		}
		return nil
	}
	fi, err := entry.Info()
	if err != nil {
		return err
	}
	if isWhiteout(fi) {
		d.deleted = append(d.deleted, inCtr)
		return nil
	}
	if fi.IsDir() && isOpaque(p) {
		hidden, err := d.hiddenBelow(rel, p)
		if err != nil {
			return err
		}
		d.deleted = append(d.deleted, hidden...)
	}
	link := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return fmt.Errorf("%s: %w", inCtr, err)
	}
	hdr.Name = filepath.ToSlash(rel)
	if fi.IsDir() {
		hdr.Name += "/"
	}
	hdr.Uname, hdr.Gname = "", ""
	if !fi.Mode().IsRegular() {
		return d.tw.WriteHeader(hdr)
	}
	if err := tarfile.AddRegular(d.tw, p, hdr, fi); err != nil {
		return fmt.Errorf("%w (pause the container first)", err)
	}
	return nil
}

// hiddenBelow lists, absolute in the container, the entries of the layers
// below that the opaque upper directory rel hides: those the directory
// does not have itself, down to the first layer where it is opaque too.
func (d *rootfsDiff) hiddenBelow(rel, upperDir string) ([]string, error) {
	own := map[string]bool{}
	entries, err := os.ReadDir(upperDir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		own[e.Name()] = true
	}
	var hidden []string
	for _, lower := range d.lowers {
		dir := filepath.Join(lower, rel)
		entries, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if own[e.Name()] {
				continue
			}
			own[e.Name()] = true // listed once, and a whiteout hides it below too
			if e.Type()&fs.ModeCharDevice != 0 {
				if fi, err := e.Info(); err == nil && isWhiteout(fi) {
					continue
				}
			}
			hidden = append(hidden, "/"+filepath.ToSlash(filepath.Join(rel, e.Name())))
		}
		if isOpaque(dir) {
			break
		}
	}
	return hidden, nil
}

// isWhiteout: overlayfs marks a deleted entry with a 0/0 character device.
func isWhiteout(fi fs.FileInfo) bool {
	if fi.Mode()&fs.ModeCharDevice == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
}

// isOpaque: a directory that hides the layers below it, marked by the
// trusted (or, mounted with userxattr, the user) overlay xattr.
func isOpaque(dir string) bool {
	for _, name := range []string{opaqueXattr, "user.overlay.opaque"} {
		buf := make([]byte, 1)
		if n, err := unix.Lgetxattr(dir, name, buf); err == nil && n == 1 && buf[0] == 'y' {
			return true
		}
	}
	return false
}
