package network

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// startUserNSProcess starts a process in new user, network, IPC and UTS
// namespaces, as the pod's infra process is, and kills it at the end.
func startUserNSProcess(t *testing.T) *exec.Cmd {
	t.Helper()
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 4 << 20, Size: 65536}}
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
		UidMappings: m, GidMappings: m, GidMappingsEnableSetgroups: true,
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// ownerOf is the inode of the user namespace that owns the namespace at path.
func ownerOf(t *testing.T, path string) uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		t.Fatalf("NS_GET_USERNS %s: %v", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestPinProcessNamespacesOutlivesTheProcess(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "ns")
	cmd := startUserNSProcess(t)
	kinds := []NamespaceKind{NamespaceUser, NamespaceNet, NamespaceIPC, NamespaceUTS}
	ns, err := PinProcessNamespaces(dir, cmd.Process.Pid, kinds, "userns-pod")
	if err != nil {
		t.Fatalf("PinProcessNamespaces: %v", err)
	}
	t.Cleanup(func() { _ = UnpinNamespaces(ns) })
	_ = cmd.Process.Kill()
	_ = cmd.Wait()

	for _, k := range kinds {
		if !NamespacePinned(ns.Path(k)) {
			t.Errorf("%s namespace not pinned at %q after its process ended", k, ns.Path(k))
		}
	}
	user := nsInode(t, ns.User)
	for _, path := range []string{ns.Net, ns.IPC, ns.UTS} {
		if got := ownerOf(t, path); got != user {
			t.Errorf("%s is owned by user namespace %d, want the pod's %d", path, got, user)
		}
	}
	assertPinnedUTSAndNet(t, ns, "userns-pod")

	if err := UnpinNamespaces(ns); err != nil {
		t.Fatalf("UnpinNamespaces: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there after UnpinNamespaces (%v)", dir, err)
	}
}

func TestPinProcessNamespacesNeedsAUserNamespace(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "ns")
	if _, err := PinProcessNamespaces(dir, os.Getpid(), []NamespaceKind{NamespaceNet}, ""); err == nil {
		t.Fatal("PinProcessNamespaces without a user namespace succeeded")
	}
	if _, err := PinNamespaces(dir, []NamespaceKind{NamespaceUser}, ""); err == nil {
		t.Fatal("PinNamespaces unshared a user namespace from a thread")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a refused pin left %s (%v)", dir, err)
	}
}
