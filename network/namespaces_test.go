package network

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/osthread"
)

func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

func TestPinAndUnpinNamespaces(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "ns")
	ownHostname, _ := os.Hostname()

	ns, err := PinNamespaces(dir, []NamespaceKind{NamespaceNet, NamespaceIPC, NamespaceUTS}, "pod-host")
	if err != nil {
		t.Fatalf("PinNamespaces: %v", err)
	}
	t.Cleanup(func() { _ = UnpinNamespaces(ns) })

	for _, kind := range []NamespaceKind{NamespaceNet, NamespaceIPC, NamespaceUTS} {
		path := ns.Path(kind)
		if want := filepath.Join(dir, string(kind)); path != want {
			t.Errorf("%s pinned at %q, want %q", kind, path, want)
		}
		if !NamespacePinned(path) {
			t.Errorf("%s: NamespacePinned(%s) = false", kind, path)
		}
		if nsInode(t, path) == nsInode(t, "/proc/self/ns/"+string(kind)) {
			t.Errorf("%s: pinned namespace is the daemon's own", kind)
		}
	}
	if h, _ := os.Hostname(); h != ownHostname {
		t.Errorf("own hostname changed to %q: the unshared thread leaked", h)
	}

	assertPinnedUTSAndNet(t, ns, "pod-host")

	if err := UnpinNamespaces(ns); err != nil {
		t.Fatalf("UnpinNamespaces: %v", err)
	}
	assertUnpinned(t, ns)
	if err := UnpinNamespaces(ns); err != nil {
		t.Errorf("second UnpinNamespaces: %v", err)
	}
}

func assertUnpinned(t *testing.T, ns Namespaces) {
	t.Helper()
	for _, p := range ns.pinPaths() {
		if NamespacePinned(p) {
			t.Errorf("%s still pinned", p)
		}
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still exists (err %v)", p, err)
		}
	}
	if _, err := os.Lstat(ns.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s still exists (err %v)", ns.Dir, err)
	}
	if m := mountsUnder(t, ns.Dir); len(m) > 0 {
		t.Errorf("mounts left under %s: %v", ns.Dir, m)
	}
}

// Recovery after a crash knows only the directory of a pod.
func TestUnpinNamespacesFromDirAlone(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "ns")
	ns, err := PinNamespaces(dir, []NamespaceKind{NamespaceNet, NamespaceUTS}, "h")
	if err != nil {
		t.Fatalf("PinNamespaces: %v", err)
	}
	t.Cleanup(func() { _ = UnpinNamespaces(ns) })

	if err := UnpinNamespaces(Namespaces{Dir: dir}); err != nil {
		t.Fatalf("UnpinNamespaces(dir only): %v", err)
	}
	assertUnpinned(t, ns)
}

func TestPinNamespacesRefusesLivePins(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "ns")
	first, err := PinNamespaces(dir, []NamespaceKind{NamespaceNet}, "")
	if err != nil {
		t.Fatalf("PinNamespaces: %v", err)
	}
	t.Cleanup(func() { _ = UnpinNamespaces(first) })
	inode := nsInode(t, first.Net)

	_, err = PinNamespaces(dir, []NamespaceKind{NamespaceNet, NamespaceUTS}, "h")
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second PinNamespaces on live pins: err = %v, want fs.ErrExist", err)
	}
	if !NamespacePinned(first.Net) || nsInode(t, first.Net) != inode {
		t.Errorf("failed second pin disturbed the first one")
	}
	if _, err := os.Lstat(filepath.Join(dir, "uts")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("failed pin left %s/uts (err %v)", dir, err)
	}
	if m := mountsUnder(t, dir); len(m) != 1 {
		t.Errorf("mounts under %s = %v, want only the first net pin", dir, m)
	}
}

func TestPinNamespacesFailsCleanly(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name     string
		kinds    []NamespaceKind
		hostname string
	}{
		{"unknown kind", []NamespaceKind{NamespaceNet, "pid"}, ""},
		{"hostname too long", []NamespaceKind{NamespaceNet, NamespaceUTS}, strings.Repeat("h", hostNameMax+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ns")
			ns, err := PinNamespaces(dir, tc.kinds, tc.hostname)
			if err == nil {
				_ = UnpinNamespaces(ns)
				t.Fatalf("PinNamespaces succeeded, want an error")
			}
			if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("failed PinNamespaces left %s (err %v)", dir, err)
			}
		})
	}
}

// A failure after the pins are mounted (the last step of PinNamespaces) is
// undone by pinning.undo: run the steps by hand and undo them.
func TestPinningUndoAfterMount(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "ns")
	flags := unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS
	p := &pinning{ns: Namespaces{Dir: dir}}
	t.Cleanup(func() { _ = UnpinNamespaces(p.ns) })
	if err := p.prepare(flags, true); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if err := osthread.Throwaway(func() error { return unshareAndPin(flags, p.ns, "h") }); err != nil {
		t.Fatalf("unshareAndPin: %v", err)
	}
	if !NamespacePinned(p.ns.Net) {
		t.Fatalf("%s not pinned before undo", p.ns.Net)
	}
	p.undo()
	assertUnpinned(t, p.ns)
}

func TestPinNamespacesNothingToPin(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ns")
	ns, err := PinNamespaces(dir, nil, "host")
	if err != nil {
		t.Fatalf("PinNamespaces(no kinds): %v", err)
	}
	if ns.Net != "" || ns.IPC != "" || ns.UTS != "" {
		t.Errorf("host-namespace pod got pins: %+v", ns)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("PinNamespaces(no kinds) made %s", dir)
	}
}

// On a shared mount (every systemd host) the pin directory becomes a private
// mount of its own, and unpinning leaves no mount behind.
func TestPinNamespacesOnSharedMount(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(sharedDir(t), "pod", "ns")
	ns, err := PinNamespaces(dir, []NamespaceKind{NamespaceNet, NamespaceIPC}, "")
	if err != nil {
		t.Fatalf("PinNamespaces: %v", err)
	}
	t.Cleanup(func() { _ = UnpinNamespaces(ns) })
	if isShared, err := onSharedMount(ns.Net); err != nil || isShared {
		t.Errorf("pin %s on a shared mount (err %v)", ns.Net, err)
	}
	if got := mountsUnder(t, dir); len(got) != 3 {
		t.Errorf("mounts under %s = %v, want the private dir and 2 pins", dir, got)
	}

	if err := UnpinNamespaces(ns); err != nil {
		t.Fatalf("UnpinNamespaces: %v", err)
	}
	assertUnpinned(t, ns)
}

// sharedDir is a fresh directory that is a shared mount of its own, as
// every directory of a systemd host sits on one.
func sharedDir(t *testing.T) string {
	t.Helper()
	shared := t.TempDir()
	if err := unix.Mount(shared, shared, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s: %v", shared, err)
	}
	t.Cleanup(func() { _ = unmountAll(shared) })
	if err := unix.Mount("", shared, "", unix.MS_SHARED, ""); err != nil {
		t.Fatalf("make %s shared: %v", shared, err)
	}
	return shared
}

// newPinRootOnShared opens a pin root below a shared mount, unmounted at
// the end of the test.
func newPinRootOnShared(t *testing.T) (*PinRoot, string) {
	t.Helper()
	root := filepath.Join(sharedDir(t), "pods")
	r, err := NewPinRoot(root)
	if err != nil {
		t.Fatalf("NewPinRoot: %v", err)
	}
	t.Cleanup(func() { _ = unmountAll(root) })
	return r, root
}

// A pin root on a shared mount becomes a private mount of its own, once:
// the pods' pins below it are its only mounts there, none per pod, and
// none on a shared mount.
func TestPinRootOnSharedMountIsMadePrivateOnce(t *testing.T) {
	requireRoot(t)
	r, root := newPinRootOnShared(t)
	if err := r.Settle(); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if got := mountsUnder(t, root); len(got) != 1 || got[0] != root {
		t.Fatalf("mounts under the root = %v, want the root alone", got)
	}
	again, err := NewPinRoot(root)
	if err != nil {
		t.Fatalf("NewPinRoot at the next start: %v", err)
	}
	if private, err := again.private(); err != nil || !private {
		t.Errorf("the pin root at the next start: private %v, %v; want private", private, err)
	}
	if got := mountsUnder(t, root); len(got) != 1 {
		t.Errorf("mounts under the root after the next start = %v, want the root alone", got)
	}
	for _, pod := range []string{"a", "b"} {
		dir := filepath.Join(root, pod, "ns")
		ns, err := r.PinNamespaces(dir, []NamespaceKind{NamespaceNet, NamespaceIPC}, "")
		if err != nil {
			t.Fatalf("PinNamespaces: %v", err)
		}
		t.Cleanup(func() { _ = UnpinNamespaces(ns) })
		if isShared, err := onSharedMount(ns.Net); err != nil || isShared {
			t.Errorf("pin %s on a shared mount (err %v)", ns.Net, err)
		}
		if got := mountsUnder(t, dir); len(got) != 2 {
			t.Errorf("mounts under %s = %v, want the 2 pins alone", dir, got)
		}
		if err := UnpinNamespaces(ns); err != nil {
			t.Fatalf("UnpinNamespaces: %v", err)
		}
		assertUnpinned(t, ns)
	}
}

// A daemon's start opens its pin root without a look at the mount table,
// which holds every pod's mounts at a restart: nothing is mounted until
// the first pod's pin, which settles the root before it pins, so that
// the root's bind cannot hide it.
func TestPinRootSettlesAtTheFirstPin(t *testing.T) {
	requireRoot(t)
	r, root := newPinRootOnShared(t)
	if got := mountsUnder(t, root); len(got) != 0 {
		t.Fatalf("mounts under the root after NewPinRoot = %v, want none before the first pin", got)
	}
	dir := filepath.Join(root, "a", "ns")
	ns, err := r.PinNamespaces(dir, []NamespaceKind{NamespaceNet}, "")
	if err != nil {
		t.Fatalf("PinNamespaces: %v", err)
	}
	t.Cleanup(func() { _ = UnpinNamespaces(ns) })
	if !NamespacePinned(ns.Net) {
		t.Fatalf("the first pod's pin %s is hidden", ns.Net)
	}
	if got := mountsUnder(t, root); len(got) != 2 || got[0] != root {
		t.Errorf("mounts under the root = %v, want the root and the pin", got)
	}
	if isShared, err := onSharedMount(ns.Net); err != nil || isShared {
		t.Errorf("pin %s on a shared mount (err %v)", ns.Net, err)
	}
	if err := r.Settle(); err != nil { // settled already: nothing more
		t.Fatalf("Settle: %v", err)
	}
	if !NamespacePinned(ns.Net) {
		t.Errorf("the pin %s is hidden after Settle", ns.Net)
	}
}

// Pins that earlier pods made below a shared root stay reachable: the root
// is not bound over them, and each new pod's pins get a private directory
// of their own, as without a root.
func TestPinRootKeepsEarlierPinsOnSharedMount(t *testing.T) {
	requireRoot(t)
	root := filepath.Join(sharedDir(t), "pods")
	old, err := PinNamespaces(filepath.Join(root, "old", "ns"), []NamespaceKind{NamespaceNet}, "")
	if err != nil {
		t.Fatalf("PinNamespaces: %v", err)
	}
	t.Cleanup(func() { _ = UnpinNamespaces(old) })
	r, err := NewPinRoot(root)
	if err != nil {
		t.Fatalf("NewPinRoot: %v", err)
	}
	if err := r.Settle(); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if !NamespacePinned(old.Net) {
		t.Fatalf("the earlier pod's pin %s is hidden after NewPinRoot", old.Net)
	}
	dir := filepath.Join(root, "new", "ns")
	ns, err := r.PinNamespaces(dir, []NamespaceKind{NamespaceNet, NamespaceIPC}, "")
	if err != nil {
		t.Fatalf("PinNamespaces: %v", err)
	}
	t.Cleanup(func() { _ = UnpinNamespaces(ns) })
	if got := mountsUnder(t, dir); len(got) != 3 {
		t.Errorf("mounts under %s = %v, want the private dir and 2 pins", dir, got)
	}
	if isShared, err := onSharedMount(ns.Net); err != nil || isShared {
		t.Errorf("pin %s on a shared mount (err %v)", ns.Net, err)
	}
}

// A pod's pins below a private root take the root's answer and look at no
// mount table of their own: given a root that says private on a shared
// mount, the pins land on that shared mount without a directory of their
// own (PinNamespaces would have made one).
func TestPinRootPinsTakeTheRootsAnswer(t *testing.T) {
	requireRoot(t)
	root := filepath.Join(sharedDir(t), "pods")
	r := PinRoot{dir: root, private: func() (bool, error) { return true, nil }}
	dir := filepath.Join(root, "a", "ns")
	ns, err := r.PinNamespaces(dir, []NamespaceKind{NamespaceNet}, "")
	if err != nil {
		t.Fatalf("PinNamespaces: %v", err)
	}
	t.Cleanup(func() { _ = UnpinNamespaces(ns) })
	if got := mountsUnder(t, dir); len(got) != 1 {
		t.Errorf("mounts under %s = %v, want the pin alone", dir, got)
	}
}

// On a private mount nothing is mounted for the root or for a pod.
func TestPinRootOnPrivateMount(t *testing.T) {
	requireRoot(t)
	private := t.TempDir()
	if err := unix.Mount(private, private, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s: %v", private, err)
	}
	t.Cleanup(func() { _ = unmountAll(private) })
	if err := unix.Mount("", private, "", unix.MS_PRIVATE, ""); err != nil {
		t.Fatalf("make %s private: %v", private, err)
	}
	root := filepath.Join(private, "pods")
	r, err := NewPinRoot(root)
	if err != nil {
		t.Fatalf("NewPinRoot: %v", err)
	}
	dir := filepath.Join(root, "a", "ns")
	ns, err := r.PinNamespaces(dir, []NamespaceKind{NamespaceNet}, "")
	if err != nil {
		t.Fatalf("PinNamespaces: %v", err)
	}
	t.Cleanup(func() { _ = UnpinNamespaces(ns) })
	if got := mountsUnder(t, root); len(got) != 1 || got[0] != ns.Net {
		t.Errorf("mounts under the root = %v, want the pin %s alone", got, ns.Net)
	}
}

// A throwaway thread that happened to be the main thread could not be ended:
// the runtime would park it for good, in the pod's namespaces, and
// /proc/self/ns would show them. Pin often enough to land there.
func TestPinNamespacesLeavesMainThreadAlone(t *testing.T) {
	requireRoot(t)
	kinds := []NamespaceKind{NamespaceNet, NamespaceIPC, NamespaceUTS}
	before := map[NamespaceKind]uint64{}
	for _, k := range kinds {
		before[k] = nsInode(t, "/proc/self/ns/"+string(k))
	}
	root := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ns, err := PinNamespaces(filepath.Join(root, strconv.Itoa(i)), kinds, "h")
			if err == nil {
				err = UnpinNamespaces(ns)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for _, k := range kinds {
		if got := nsInode(t, "/proc/self/ns/"+string(k)); got != before[k] {
			t.Errorf("main thread's %s namespace changed (%d -> %d)", k, before[k], got)
		}
	}
}

// assertPinnedUTSAndNet checks, from inside the pinned namespaces, that the
// UTS namespace has hostname and the network namespace has lo up.
func assertPinnedUTSAndNet(t *testing.T, ns Namespaces, hostname string) {
	t.Helper()
	var uts unix.Utsname
	if err := inNamespace(t, ns.UTS, unix.CLONE_NEWUTS, func() error { return unix.Uname(&uts) }); err != nil {
		t.Fatal(err)
	}
	if got := unix.ByteSliceToString(uts.Nodename[:]); got != hostname {
		t.Errorf("hostname in the pinned UTS namespace = %q, want %s", got, hostname)
	}
	var loFlags net.Flags
	if err := inNamespace(t, ns.Net, unix.CLONE_NEWNET, func() error {
		lo, err := net.InterfaceByName("lo")
		if err == nil {
			loFlags = lo.Flags
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if loFlags&net.FlagUp == 0 {
		t.Errorf("lo in the pinned network namespace is down (flags %v)", loFlags)
	}
}
