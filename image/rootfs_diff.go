package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"syscall"

	"github.com/minicri/minicri/internal/fstree"
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
// The upper dir is the container's to fill, and an image's layers are the
// image author's: both are read from the host side through internal/fstree,
// which follows no link anywhere (a link in a lower layer where the
// container made a directory names a host directory, whose entries must
// not be listed); only regular files are opened (never a fifo or a
// device), a file is copied as large as it was when opened, and a sparse
// one costs what it holds, not its size (tarfile.AddFile). Pause the
// container first for a diff that matches its processes.
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
	upper, err := fstree.OpenRoot(s.upperDir(id))
	if err != nil {
		return nil, fmt.Errorf("rootfs %s diff: %w", id, err)
	}
	defer upper.Close()
	d := rootfsDiff{upper: upper, tw: tarfile.NewWriter(w), skip: map[string]bool{}}
	for _, dir := range s.lowerDirs(rec) {
		lower, err := fstree.OpenRoot(dir)
		if err != nil {
			return nil, fmt.Errorf("rootfs %s diff: %w", id, err)
		}
		defer lower.Close()
		d.lowers = append(d.lowers, lower)
	}
	for _, p := range skip {
		d.skip[path.Clean("/"+p)] = true
	}
	if err := upper.Walk("", d.add); err != nil {
		return nil, fmt.Errorf("rootfs %s diff: %w", id, err)
	}
	if err := d.tw.Close(); err != nil {
		return nil, fmt.Errorf("rootfs %s diff: %w", id, err)
	}
	return d.deleted, nil
}

type rootfsDiff struct {
	upper   *fstree.Root
	lowers  []*fstree.Root // top first
	tw      *tarfile.Writer
	skip    map[string]bool
	deleted []string
}

func (d *rootfsDiff) add(e *fstree.Entry) error {
	inCtr := "/" + e.Rel
	if d.skip[inCtr] {
		return fstree.SkipDir
	}
	fi := e.Info()
	if isWhiteout(fi) {
		d.deleted = append(d.deleted, inCtr)
		return nil
	}
	if e.IsDir() && isOpaque(e.Xattr) {
		hidden, err := d.hiddenBelow(e.Rel)
		if err != nil {
			return err
		}
		d.deleted = append(d.deleted, hidden...)
	}
	link := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		var err error
		if link, err = e.Readlink(); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return fmt.Errorf("%s: %w", inCtr, err)
	}
	hdr.Name = e.Rel
	if fi.IsDir() {
		hdr.Name += "/"
	}
	hdr.Uname, hdr.Gname = "", ""
	if !fi.Mode().IsRegular() {
		return d.tw.WriteHeader(hdr)
	}
	f, err := e.Open()
	if err != nil {
		return fmt.Errorf("%w (pause the container first)", err)
	}
	defer f.Close()
	if err := d.tw.AddFile(f, hdr); err != nil {
		return fmt.Errorf("%w (pause the container first)", err)
	}
	return nil
}

// hiddenBelow lists, absolute in the container, the entries of the layers
// below that the opaque upper directory rel hides, as overlay merges them:
// layer by layer, top first, down to the first layer where rel, or a
// directory on the way to it, is opaque or is not a directory (a file, a
// whiteout or a link hides whatever the layers below have there). Nothing
// is followed: a link in a layer is an entry, never a way to a directory.
func (d *rootfsDiff) hiddenBelow(rel string) ([]string, error) {
	own := map[string]bool{}
	dir, err := d.upper.OpenDir(rel)
	if err != nil {
		return nil, err
	}
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		own[name] = true
	}
	var hidden []string
	for _, lower := range d.lowers {
		entries, last, err := layerDir(lower, rel)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if own[e.Name] {
				continue
			}
			own[e.Name] = true // listed once, and a whiteout hides it below too
			if isWhiteout(e.Info()) {
				continue
			}
			hidden = append(hidden, "/"+e.Rel)
		}
		if last {
			break
		}
	}
	return hidden, nil
}

// layerDir reads the directory rel of one layer, one component at a time
// without following a link, and says whether the layers below it are
// hidden there (rel or a directory on the way is opaque, or one of them
// is not a directory in this layer).
func layerDir(layer *fstree.Root, rel string) (entries []*fstree.Entry, last bool, err error) {
	parts := strings.Split(rel, "/")
	for i := range parts {
		e, err := layer.Lstat(strings.Join(parts[:i+1], "/"))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, last, nil
		}
		if err != nil {
			return nil, false, err
		}
		if !e.IsDir() {
			return nil, true, nil
		}
		dir, err := layer.OpenDir(e.Rel)
		if err != nil {
			return nil, false, err
		}
		opaque := isOpaque(func(name, want string) bool { return fstree.FdXattr(int(dir.Fd()), name, want) })
		dir.Close()
		last = last || opaque
	}
	err = layer.Walk(rel, func(e *fstree.Entry) error {
		entries = append(entries, e)
		return fstree.SkipDir
	})
	return entries, last, err
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
// trusted (or, mounted with userxattr, the user) overlay xattr, which
// xattr reads.
func isOpaque(xattr func(name, want string) bool) bool {
	return xattr(opaqueXattr, "y") || xattr("user.overlay.opaque", "y")
}
