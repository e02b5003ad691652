// Package network gives a pod its namespaces and its network: namespaces
// pinned as bind-mounted nsfs files (no pause process), CNI set-up and
// teardown with libcni, and the pod's /etc/resolv.conf, /etc/hosts and
// /etc/hostname.
package network

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/mountinfo"
	"github.com/minicri/minicri/internal/osthread"
)

// NamespaceKind is a namespace a pod can pin. Its value is both the file name
// under /proc/PID/ns and the name of the pin file in the pod's directory.
type NamespaceKind string

// The namespaces a pod shares among its containers.
const (
	NamespaceNet NamespaceKind = "net"
	NamespaceIPC NamespaceKind = "ipc"
	NamespaceUTS NamespaceKind = "uts"
	// NamespaceUser is pinned only from a process (PinProcessNamespaces):
	// a thread of a multi-threaded process cannot unshare one.
	NamespaceUser NamespaceKind = "user"
)

// pinnableKinds lists every kind with its unshare flag, in the order pins are
// made and undone.
var pinnableKinds = []pinnable{
	{NamespaceNet, unix.CLONE_NEWNET},
	{NamespaceIPC, unix.CLONE_NEWIPC},
	{NamespaceUTS, unix.CLONE_NEWUTS},
	{NamespaceUser, unix.CLONE_NEWUSER},
}

// Namespaces are the pinned namespace files of one pod. An empty path means
// the pod was not given its own namespace of that kind (it uses the host's).
type Namespaces struct {
	Dir string // directory holding the pin files
	Net string // Dir/net when pinned
	IPC string // Dir/ipc when pinned
	UTS string // Dir/uts when pinned
	// User is Dir/user for a pod with a user namespace of its own, which
	// owns the pod's other namespaces.
	User string `json:",omitempty"`
}

// Path returns the pin file of kind, or "" when that namespace is not pinned.
func (ns Namespaces) Path(kind NamespaceKind) string {
	switch kind {
	case NamespaceNet:
		return ns.Net
	case NamespaceIPC:
		return ns.IPC
	case NamespaceUTS:
		return ns.UTS
	case NamespaceUser:
		return ns.User
	}
	return ""
}

func (ns *Namespaces) setPath(kind NamespaceKind, path string) {
	switch kind {
	case NamespaceNet:
		ns.Net = path
	case NamespaceIPC:
		ns.IPC = path
	case NamespaceUTS:
		ns.UTS = path
	case NamespaceUser:
		ns.User = path
	}
}

// PinNamespaces creates new namespaces of the given kinds and keeps them alive
// by bind-mounting each onto dir/KIND, so that they outlive every process in
// them, and the daemon itself. In a new UTS namespace the hostname is set to
// hostname (ignored without one); in a new network namespace lo is brought up.
// dir should be dedicated to the pins (e.g. RUNDIR/pods/ID/ns): it may itself
// become a mount (see ensurePrivateMount), which UnpinNamespaces detaches with
// everything under it. On failure nothing is left behind. Pinning over
// existing pins fails with an error matching fs.ErrExist; run UnpinNamespaces
// first to recover a half-made pod.
func PinNamespaces(dir string, kinds []NamespaceKind, hostname string) (Namespaces, error) {
	return pinNamespaces(dir, kinds, hostname, true)
}

func pinNamespaces(dir string, kinds []NamespaceKind, hostname string, lookMounts bool) (Namespaces, error) {
	if dir == "" {
		return Namespaces{}, errors.New("pin namespaces: empty directory")
	}
	flags, err := unshareFlags(kinds)
	if err != nil {
		return Namespaces{}, err
	}
	if flags&unix.CLONE_NEWUSER != 0 {
		return Namespaces{}, errors.New("pin namespaces: a user namespace is pinned from a process (PinProcessNamespaces)")
	}
	if flags == 0 {
		return Namespaces{Dir: dir}, nil
	}
	return pin(dir, flags, hostname, lookMounts, func(ns Namespaces) error {
		if err := osthread.Throwaway(func() error { return unshareAndPin(flags, ns, hostname) }); err != nil {
			return fmt.Errorf("pin namespaces in %s: %w", dir, err)
		}
		return nil
	})
}

// PinRoot is the directory below which a node's pods pin their namespaces
// (RUNDIR/pods). Whether a pin propagates to other mount namespaces is a
// question of the mount that holds it, which is the root's for every pod:
// the root answers it once, making itself a private mount of its own where
// it sits on a shared one, so that a pod's pins need no look at the mount
// table, whose reading grows with every pod's mounts. An operator who
// makes the run dir shared later (mount --make-rshared /) restarts the
// daemon, as for any change of the mounts it was started on.
//
// The answer is settled at the first pin, or by Settle, not by NewPinRoot:
// it reads the mount table, and a daemon's restart, which has every pod's
// mounts in that table, pins nothing.
type PinRoot struct {
	dir string
	// private says, once settled, whether the root is known to hold no
	// shared mount at or below it; false, or an error, leaves each pin to
	// look for itself, as PinNamespaces does.
	private func() (bool, error)
}

// NewPinRoot makes dir (0700) for the pods' pins. How pins below it stay
// in the daemon's mount namespace is decided once, when Settle or the
// first pin asks (settlePinRoot).
func NewPinRoot(dir string) (*PinRoot, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pin root: %w", err)
	}
	clean := filepath.Clean(dir)
	return &PinRoot{dir: clean, private: sync.OnceValues(func() (bool, error) { return settlePinRoot(clean) })}, nil
}

// Settle decides now how pins below the root stay in the daemon's mount
// namespace, if no pin has yet: a daemon calls it once its start is done,
// so that its first pod does not wait for the mount table. An error says
// why the root could not be made private; pods then look for themselves,
// as without a root.
func (r *PinRoot) Settle() error {
	if r == nil {
		return nil
	}
	_, err := r.private()
	return err
}

// settlePinRoot decides how pins below dir stay in the daemon's mount
// namespace, and says whether the root is private. A root on a private or
// slave mount needs nothing. A root on a shared mount with nothing mounted
// at or below it (a fresh run dir) becomes a private bind mount of itself,
// which stays for the next start, as ip-netns keeps its directory's. A root
// already on a mount of its own keeps it, made private; one with pins of
// earlier pods below a shared mount is left as it is, and its pods look for
// themselves: a bind over it would hide those pins.
func settlePinRoot(dir string) (bool, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false, fmt.Errorf("pin root: resolve %s: %w", dir, err)
	}
	holder, err := mountinfo.Lookup(mountinfo.Path, real)
	if err != nil {
		return false, fmt.Errorf("pin root %s: %w", dir, err)
	}
	if !mountinfo.Shared(holder) {
		return true, nil
	}
	if holder.Mountpoint == real {
		if err := unix.Mount("", real, "", unix.MS_PRIVATE, ""); err != nil {
			return false, fmt.Errorf("pin root: make %s a private mount: %w", real, err)
		}
		return true, nil
	}
	below, err := mountsBelow(real)
	if err != nil || below {
		return false, err
	}
	if _, err := ensurePrivateMount(real); err != nil {
		return false, fmt.Errorf("pin root: %w", err)
	}
	return true, nil
}

// PinNamespaces is the package's PinNamespaces for a dir below the root:
// without a look at the mount table when the root is private.
func (r *PinRoot) PinNamespaces(dir string, kinds []NamespaceKind, hostname string) (Namespaces, error) {
	clean := filepath.Clean(dir)
	private := false
	if clean != r.dir && mountinfo.Within(clean, r.dir) {
		// Settled before the first pin below the root: a bind made over
		// the root after it would hide that pin.
		private, _ = r.private() // an error: the pin looks for itself
	}
	return pinNamespaces(dir, kinds, hostname, !private)
}

// hostNameMax is HOST_NAME_MAX: the longest name sethostname(2) takes.
const hostNameMax = 64

// pinning remembers what one PinNamespaces call made, so that a failure undoes
// exactly that and not pins or directories that existed before the call.
type pinning struct {
	ns        Namespaces
	madeDir   bool
	madeMount bool
	madeFiles []string
}

// pin checks the hostname, prepares the pin files of flags in dir and has
// fill pin the namespaces onto them; lookMounts makes dir a private mount
// of its own where it sits on a shared one (ensurePrivateMount). On failure
// it leaves nothing behind.
func pin(dir string, flags int, hostname string, lookMounts bool, fill func(ns Namespaces) error) (Namespaces, error) {
	if flags&unix.CLONE_NEWUTS != 0 && len(hostname) > hostNameMax {
		// sethostname(2) would refuse it too; say why before making anything.
		return Namespaces{}, fmt.Errorf("pin namespaces: hostname %q longer than %d bytes", hostname, hostNameMax)
	}
	p := &pinning{ns: Namespaces{Dir: dir}}
	if err := p.prepare(flags, lookMounts); err != nil {
		p.undo()
		return Namespaces{}, fmt.Errorf("pin namespaces in %s: %w", dir, err)
	}
	if err := fill(p.ns); err != nil {
		p.undo()
		return Namespaces{}, err
	}
	return p.ns, nil
}

// prepare makes dir, a private mount of it if lookMounts finds one needed,
// and the empty pin files.
func (p *pinning) prepare(flags int, lookMounts bool) error {
	dir := p.ns.Dir
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		p.madeDir = true
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if lookMounts {
		var err error
		if p.madeMount, err = ensurePrivateMount(dir); err != nil {
			return err
		}
	}
	for _, k := range pinnableKinds {
		if flags&k.flag == 0 {
			continue
		}
		path := filepath.Join(dir, string(k.kind))
		if err := createPinFile(path); err != nil {
			return fmt.Errorf("pin %s namespace: %w", k.kind, err)
		}
		p.madeFiles = append(p.madeFiles, path)
		p.ns.setPath(k.kind, path)
	}
	return nil
}

// undo is best effort: what it cannot remove, UnpinNamespaces at recovery does.
func (p *pinning) undo() {
	for _, path := range p.madeFiles {
		_ = unpinFile(path)
	}
	if p.madeMount {
		_ = unmountAll(p.ns.Dir)
	}
	if p.madeDir {
		_ = os.Remove(p.ns.Dir)
	}
}

// pinnable is a namespace kind with the unshare(2) flag that makes one.
type pinnable struct {
	kind NamespaceKind
	flag int
}

func unshareFlags(kinds []NamespaceKind) (int, error) {
	flags := 0
	for _, kind := range kinds {
		i := slices.IndexFunc(pinnableKinds, func(p pinnable) bool { return p.kind == kind })
		if i < 0 {
			return 0, fmt.Errorf("pin namespaces: cannot pin a %q namespace (only net, ipc, uts, user)", kind)
		}
		flags |= pinnableKinds[i].flag
	}
	return flags, nil
}

// createPinFile makes the empty file a namespace is bind-mounted onto. O_EXCL
// stops a second PinNamespaces from stacking a mount on a live pin.
func createPinFile(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o400)
	if err != nil {
		return err
	}
	return f.Close()
}

// unshareAndPin runs on a throwaway thread: it moves the thread into new
// namespaces and bind-mounts them onto the prepared pin files. The mount
// namespace is the process's own, so the pins are visible to the whole host.
func unshareAndPin(flags int, ns Namespaces, hostname string) error {
	if err := unix.Unshare(flags); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	for _, k := range pinnableKinds {
		target := ns.Path(k.kind)
		if target == "" {
			continue
		}
		source := "/proc/thread-self/ns/" + string(k.kind)
		if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s onto %s: %w", source, target, err)
		}
	}
	if ns.UTS != "" && hostname != "" {
		if err := unix.Sethostname([]byte(hostname)); err != nil {
			return fmt.Errorf("set hostname %q: %w", hostname, err)
		}
	}
	if ns.Net != "" {
		if err := bringUpLoopback(); err != nil {
			return err
		}
	}
	return nil
}

// bringUpLoopback sets IFF_UP on lo of the calling thread's network
// namespace: a socket belongs to the namespace it was created in.
func bringUpLoopback() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bring up lo: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("bring up lo: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring up lo: get flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring up lo: set flags: %w", err)
	}
	return nil
}

// UnpinNamespaces unmounts and removes a pod's pin files, undoes the private
// mount PinNamespaces may have made of ns.Dir, and removes ns.Dir when empty.
// The namespaces die once no process uses them. It is idempotent, returns nil
// for pins already gone, and needs only ns.Dir: the files Dir/net, Dir/ipc and
// Dir/uts are always looked at, so recovery after a crash can call
// UnpinNamespaces(Namespaces{Dir: dir}).
func UnpinNamespaces(ns Namespaces) error {
	var errs []error
	for _, path := range ns.pinPaths() {
		if err := unpinFile(path); err != nil {
			errs = append(errs, err)
		}
	}
	if ns.Dir != "" && len(errs) == 0 {
		if err := unmountAll(ns.Dir); err != nil {
			errs = append(errs, err)
		} else if err := os.Remove(ns.Dir); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
			errs = append(errs, fmt.Errorf("remove %s: %w", ns.Dir, err))
		}
	}
	return errors.Join(errs...)
}

// pinPaths is the set of files to unpin: those recorded in ns plus the
// standard names under Dir, in case ns was rebuilt from Dir alone.
func (ns Namespaces) pinPaths() []string {
	var paths []string
	for _, k := range pinnableKinds {
		for _, p := range []string{ns.Path(k.kind), ns.dirPath(k.kind)} {
			if p != "" && !slices.Contains(paths, p) {
				paths = append(paths, p)
			}
		}
	}
	return paths
}

func (ns Namespaces) dirPath(kind NamespaceKind) string {
	if ns.Dir == "" {
		return ""
	}
	return filepath.Join(ns.Dir, string(kind))
}

func unpinFile(path string) error {
	if err := unmountAll(path); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove pin %s: %w", path, err)
	}
	return nil
}

// maxStackedMounts bounds unmountAll: more mounts than this on one path is
// not something this package makes, and looping forever would hide it.
const maxStackedMounts = 8

// unmountAll detaches every mount stacked on path. EINVAL (not a mount point)
// and ENOENT mean there is nothing (more) to undo.
func unmountAll(path string) error {
	for range maxStackedMounts {
		err := unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil
		default:
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after %d unmounts", path, maxStackedMounts)
}

// NamespacePinned reports whether path is a live namespace file: a pin made
// by PinNamespaces (or /proc/PID/ns/KIND). After a restart this tells a pod
// whose namespaces survived from one whose pins are gone (e.g. after a reboot).
func NamespacePinned(path string) bool {
	if path == "" {
		return false
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}
