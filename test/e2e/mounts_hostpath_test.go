//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A bind mount whose host path does not exist is made on the host as a
// directory, parents too (0755, root's), as containerd and cri-o do for
// Docker's sake: what a hostPath volume of type "" gets
// (docs/security.md). A host path that is a dangling symlink is refused,
// and nothing is made where it points.
func TestMissingHostPathIsMadeADirectory(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	d.bridgeNetwork(t)
	podCfg := d.podConfig("missing-hostpath")
	pod := d.runPod(t, podCfg)

	missing := filepath.Join(t.TempDir(), "made", "by", "minicri")
	ctr := containerConfig("writer", ref, "sh", "-c", "echo in-pod > /vol/file && ls -ld /vol")
	ctr.Mounts = []*runtime.Mount{{ContainerPath: "/vol", HostPath: missing}}
	st, out := d.runToExit(t, pod, podCfg, ctr)
	if st.GetExitCode() != 0 {
		t.Fatalf("container exited %d: %s", st.GetExitCode(), out)
	}
	for _, p := range []string{missing, filepath.Dir(missing)} {
		var fi syscall.Stat_t
		if err := syscall.Stat(p, &fi); err != nil {
			t.Fatalf("the missing host path: %v", err)
		}
		if fi.Mode&syscall.S_IFMT != syscall.S_IFDIR || fi.Mode&0o7777 != 0o755 || fi.Uid != 0 || fi.Gid != 0 {
			t.Errorf("%s made with mode %o, owner %d:%d; want a 0755 directory of root's", p, fi.Mode, fi.Uid, fi.Gid)
		}
	}
	if b, err := os.ReadFile(filepath.Join(missing, "file")); err != nil || string(b) != "in-pod\n" {
		t.Errorf("the pod's file on the host: %q, %v", b, err)
	}

	target := filepath.Join(t.TempDir(), "never")
	link := filepath.Join(t.TempDir(), "dangling")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	bad := containerConfig("dangling", ref, "true")
	bad.Mounts = []*runtime.Mount{{ContainerPath: "/vol", HostPath: link}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.Runtime.CreateContainer(ctx, pod, bad, podCfg); err == nil || !strings.Contains(err.Error(), link) {
		t.Errorf("CreateContainer with a dangling symlink as host path = %v, want an error naming it", err)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("the symlink's target was made (%v)", err)
	}
}
