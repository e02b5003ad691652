// Package fstree walks and opens the trees someone else controls (a
// container's upper dir, an image's layers, CRIU's output) without ever
// following a symbolic link: every directory is opened beneath the walk's
// root with openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, every entry is
// read relative to its directory's descriptor (fstatat, readlinkat,
// openat with O_NOFOLLOW). A name swapped for a link while the walk runs
// is refused, never followed out of the tree: filepath.WalkDir and
// os.ReadDir resolve every path again from "/", links on the way included.
package fstree

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// resolve keeps openat2 below the root and off every link on the way.
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// ErrNotDir: a path that should be a directory is something else (a link
// included), or was replaced by one while it was walked.
var ErrNotDir = errors.New("not a directory")

// Root is an open directory whose entries are read beneath it.
type Root struct{ f *os.File }

// OpenRoot opens dir, which must be a directory and not a link itself.
// The path up to it is the caller's (a daemon's own directory).
func OpenRoot(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: notDir(err)}
	}
	return &Root{f: os.NewFile(uintptr(fd), dir)}, nil
}

// Close closes the root's descriptor.
func (r *Root) Close() error { return r.f.Close() }

// Fd is the root's descriptor.
func (r *Root) Fd() uintptr { return r.f.Fd() }

// Name is the path the root was opened by.
func (r *Root) Name() string { return r.f.Name() }

// OpenDir opens the directory rel (slash-separated, relative to the root;
// "" or "." is the root) when no component of it is a link: a link, or
// anything not a directory, on the way is ErrNotDir, a missing component
// fs.ErrNotExist.
func (r *Root) OpenDir(rel string) (*os.File, error) {
	rel = clean(rel)
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolve}
	fd, err := unix.Openat2(int(r.f.Fd()), rel, how)
	// EAGAIN: a rename elsewhere on the file system raced the lookup, which
	// RESOLVE_BENEATH refuses to trust; a pod renaming in a loop must not
	// fail the walk, nor hold it for long.
	for try := 0; errors.Is(err, unix.EAGAIN) && try < 16; try++ {
		fd, err = unix.Openat2(int(r.f.Fd()), rel, how)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path.Join(r.f.Name(), rel), Err: notDir(err)}
	}
	return os.NewFile(uintptr(fd), path.Join(r.f.Name(), rel)), nil
}

// Lstat reports on rel without following it or a link on the way to it.
func (r *Root) Lstat(rel string) (*Entry, error) {
	rel = clean(rel)
	dir, err := r.OpenDir(path.Dir(rel))
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	// Without its directory: the entry's descriptor-relative methods are
	// for a walk's entries only.
	e := &Entry{Rel: rel, Name: path.Base(rel)}
	if err := unix.Fstatat(int(dir.Fd()), e.Name, &e.Stat, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: path.Join(r.f.Name(), rel), Err: err}
	}
	return e, nil
}

// SkipDir, returned by a WalkFunc, leaves the entry's own entries out
// (for anything but a directory it changes nothing).
var SkipDir = fs.SkipDir

// WalkFunc is called once for each entry below the root. The entry's
// descriptor-relative methods (Open, Readlink, Xattr) work only during the
// call.
type WalkFunc func(e *Entry) error

// Walk calls fn for every entry below the directory rel of the root ("" is
// the root; rel itself is not an entry), each directory's entries in name
// order, before the entries of its subdirectories: a directory always
// comes before what it holds. An entry removed while the walk runs is left
// out, and so are the entries of a directory replaced meanwhile by a link
// or another file: the link is never followed.
func (r *Root) Walk(rel string, fn WalkFunc) error {
	return r.walk(clean(rel), fn)
}

func (r *Root) walk(rel string, fn WalkFunc) error {
	dir, err := r.OpenDir(rel)
	if err != nil {
		return err
	}
	subdirs, err := r.list(dir, rel, fn)
	dir.Close()
	if err != nil {
		return err
	}
	for _, sub := range subdirs {
		if err := r.walk(sub, fn); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrNotDir) {
			return err
		}
	}
	return nil
}

// list hands dir's entries to fn and returns the subdirectories to walk.
func (r *Root) list(dir *os.File, rel string, fn WalkFunc) ([]string, error) {
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var subdirs []string
	for _, name := range names {
		e := &Entry{Rel: path.Join(rel, name), Name: name, dir: dir}
		if err := unix.Fstatat(int(dir.Fd()), name, &e.Stat, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed while walked
			}
			return nil, &fs.PathError{Op: "lstat", Path: path.Join(r.f.Name(), e.Rel), Err: err}
		}
		err := fn(e)
		e.dir = nil
		if errors.Is(err, SkipDir) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if e.IsDir() {
			subdirs = append(subdirs, e.Rel)
		}
	}
	return subdirs, nil
}

// Entry is one entry of a walk, as lstat saw it.
type Entry struct {
	Rel  string // slash-separated, relative to the root
	Name string
	Stat unix.Stat_t
	dir  *os.File // its directory, during the WalkFunc's call
}

// IsDir reports whether the entry is a directory (never a link to one).
func (e *Entry) IsDir() bool { return e.Stat.Mode&unix.S_IFMT == unix.S_IFDIR }

// Info is the entry as an fs.FileInfo whose Sys is a *syscall.Stat_t,
// which archive/tar's FileInfoHeader reads owners and devices from.
func (e *Entry) Info() fs.FileInfo { return fileInfo{name: e.Name, st: sysStat(&e.Stat)} }

// Readlink reads the link the entry is, without following it.
func (e *Entry) Readlink() (string, error) {
	if e.dir == nil {
		return "", errNoDir
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(int(e.dir.Fd()), e.Name, buf)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: e.Rel, Err: err}
	}
	return string(buf[:n]), nil
}

// Open opens the entry for reading when it is still the regular file the
// walk saw: never a link (O_NOFOLLOW), never a fifo or device for long
// (O_NONBLOCK), and not another file put in its place.
func (e *Entry) Open() (*os.File, error) {
	if e.dir == nil {
		return nil, errNoDir
	}
	fd, err := unix.Openat(int(e.dir.Fd()), e.Name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: e.Rel, Err: err}
	}
	f := os.NewFile(uintptr(fd), e.Rel)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, &fs.PathError{Op: "fstat", Path: e.Rel, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Dev != e.Stat.Dev || st.Ino != e.Stat.Ino {
		f.Close()
		return nil, fmt.Errorf("%s: replaced while read", e.Rel)
	}
	return f, nil
}

// Xattr reports whether the directory entry has the extended attribute
// name with the value want.
func (e *Entry) Xattr(name, want string) bool {
	if e.dir == nil || !e.IsDir() {
		return false
	}
	fd, err := unix.Openat(int(e.dir.Fd()), e.Name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return FdXattr(fd, name, want)
}

// FdXattr reports whether the file open as fd has the extended attribute
// name with the value want.
func FdXattr(fd int, name, want string) bool {
	buf := make([]byte, len(want)+1)
	n, err := unix.Fgetxattr(fd, name, buf)
	return err == nil && string(buf[:n]) == want
}

var errNoDir = errors.New("fstree: entry used after its walk call")

func clean(rel string) string {
	rel = path.Clean("/" + rel)[1:]
	if rel == "" {
		return "."
	}
	return rel
}

// notDir says ErrNotDir for what openat2 and open answer on a link or a
// non-directory on the way.
func notDir(err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV) {
		return fmt.Errorf("%w (%w)", ErrNotDir, err)
	}
	return err
}

type fileInfo struct {
	name string
	st   *syscall.Stat_t
}

func (fi fileInfo) Name() string       { return fi.name }
func (fi fileInfo) Size() int64        { return fi.st.Size }
func (fi fileInfo) ModTime() time.Time { return time.Unix(fi.st.Mtim.Sec, fi.st.Mtim.Nsec) }
func (fi fileInfo) IsDir() bool        { return fi.Mode().IsDir() }
func (fi fileInfo) Sys() any           { return fi.st }
func (fi fileInfo) Mode() fs.FileMode {
	m := fs.FileMode(fi.st.Mode & 0o777)
	switch fi.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	}
	if fi.st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if fi.st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if fi.st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// sysStat is st as the syscall package spells it (the same fields).
func sysStat(st *unix.Stat_t) *syscall.Stat_t {
	return &syscall.Stat_t{
		Dev: st.Dev, Ino: st.Ino, Nlink: st.Nlink, Mode: st.Mode, Uid: st.Uid, Gid: st.Gid,
		Rdev: st.Rdev, Size: st.Size, Blksize: st.Blksize, Blocks: st.Blocks,
		Atim: syscall.Timespec{Sec: st.Atim.Sec, Nsec: st.Atim.Nsec},
		Mtim: syscall.Timespec{Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec},
		Ctim: syscall.Timespec{Sec: st.Ctim.Sec, Nsec: st.Ctim.Nsec},
	}
}
