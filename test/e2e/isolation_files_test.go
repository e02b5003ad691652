//go:build e2e

package e2e

import (
	"archive/tar"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// nobodyUID is the host user of the attacks: no group, no capability.
const nobodyUID = 65534

// euidSource prints the effective uid: a setuid-root copy shows whether
// the setuid bit worked (busybox drops a setuid bit by itself, so it
// cannot tell).
const euidSource = `#include <stdio.h>
#include <unistd.h>
int main(void) { printf("euid=%d\n", (int)geteuid()); return 0; }
`

// attackImage is busybox with what a hostile image ships: /suid, a
// setuid-root binary printing its effective uid; /kmsg, the kernel log
// (c 1:11) open to all; /null (c 1:3), a device the containers' device
// cgroup allows, so that only nodev keeps it from opening.
func attackImage(t *testing.T) v1.Image {
	t.Helper()
	body := staticProgram(t, euidSource)
	suid := testimage.Entry{Header: tar.Header{Typeflag: tar.TypeReg, Name: "suid", Mode: 0o4755, Size: int64(len(body))}, Body: body}
	return testimage.Image(t, []v1.Layer{testimage.BusyboxLayer(t),
		testimage.Layer(t, suid, testimage.CharDevice("kmsg", 1, 11), testimage.CharDevice("null", 1, 3))})
}

// staticProgram compiles a C program with Debian's gcc, static so that
// it runs in any image, and answers the binary.
func staticProgram(t *testing.T, source string) []byte {
	t.Helper()
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "prog.c"), filepath.Join(dir, "prog")
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-static", "-Os", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("build a static program: %v\n%s", err, out)
	}
	body, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// startAttackDaemon is a daemon for user-namespaced pods with the attack
// image pulled.
func startAttackDaemon(t *testing.T) (d *Daemon, ref string) {
	t.Helper()
	d, _ = startUsernsDaemon(t)
	reg := registry.Start(t, registry.Options{})
	ref = reg.Host() + "/e2e/attack:v1"
	testimage.Push(t, attackImage(t), ref)
	d.pull(t, ref)
	return d, ref
}

// usernsContainer is a container config for a pod of usernsPodConfig.
func usernsContainer(name, image string, cmd ...string) *runtime.ContainerConfig {
	cfg := containerConfig(name, image, cmd...)
	cfg.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
		NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_CONTAINER, UsernsOptions: usernsOptions()},
	}}
	return cfg
}

// probeScript reads paths from stdin and prints, for each, what the user
// running it could do: "enter" or "list" a dir, "read" a file, "stat"
// anything else. Unreachable paths print nothing; cheap shell builtins
// come first, as most paths are. It succeeds whatever the last path gave.
const probeScript = `while IFS= read -r p; do
  [ -e "$p" ] || [ -L "$p" ] || continue
  if [ -d "$p" ]; then
    (cd "$p") 2>/dev/null && echo "enter $p"
    [ -n "$(ls -a "$p" 2>/dev/null)" ] && echo "list $p"
  elif [ -f "$p" ]; then
    head -c1 "$p" >/dev/null 2>&1 && echo "read $p"
  else
    echo "stat $p"
  fi
done
exit 0`

// probeAs runs probeScript as uid over paths and returns what it could
// do, one line each.
func probeAs(t *testing.T, uid int, paths []string) []string {
	t.Helper()
	out, ok := asUID(t, uid, strings.Join(paths, "\n")+"\n", "/bin/busybox", "sh", "-c", probeScript)
	if !ok {
		t.Fatalf("probe as uid %d failed: %s", uid, out)
	}
	var lines []string
	for _, line := range strings.Split(out, "\n") {
		if line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}

// allPaths walks dirs as root, not following symlinks.
func allPaths(t *testing.T, dirs ...string) []string {
	t.Helper()
	var paths []string
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
			if err == nil {
				paths = append(paths, p)
			}
			return nil // something removed meanwhile: skip it
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return paths
}

// rootfsDir is the image store's dir of a container's rootfs.
func (d *Daemon) rootfsDir(ctrID string) string {
	return filepath.Join(d.Root, "image", "snapshots", ctrID)
}

// With a plain pod and a user-namespaced pod running, each with a file its
// container wrote, a host user (nobody) enters no directory and reads no
// file anywhere under the state root and the run dir, cannot run the
// image's setuid binary nor open its device nodes; nor does the user-
// namespaced pod's root (its host uid), not even its own rootfs; and
// inside that pod the image's device nodes do not open (nodev).
func TestNodeUsersCannotEnterPodFiles(t *testing.T) {
	d, ref := startAttackDaemon(t)
	writer := "echo secret-$0 > /tmp/secret && exec sleep 600"

	plainCfg := d.podConfig("plain")
	plainPod := d.runPod(t, plainCfg)
	plainCtr := d.startContainer(t, plainPod, plainCfg, containerConfig("writer", ref, "sh", "-c", writer, "plain"))

	usernsCfg := d.usernsPodConfig("userns")
	usernsPod := d.runPodOn(t, usernsCfg, usernsHandler)
	usernsCtr := d.startContainer(t, usernsPod, usernsCfg, usernsContainer("writer", ref, "sh", "-c", writer, "userns"))

	secrets := map[string]string{}
	for name, id := range map[string]string{"plain": plainCtr, "userns": usernsCtr} {
		path := filepath.Join(d.rootfsDir(id), "upper", "tmp", "secret")
		waitFor(t, name+"'s container to write its file", 30*time.Second, func() bool {
			b, err := os.ReadFile(path)
			return err == nil && string(b) == "secret-"+name+"\n"
		})
		secrets[name] = path
	}

	d.checkNoEntry(t, secrets["plain"])

	// An older minicri's modes (state root 0711, the way to a user-
	// namespaced rootfs o+x, the empty lower dir 0755) are repaired at
	// start.
	for _, dir := range []string{d.Root, filepath.Join(d.Root, "image"), filepath.Join(d.Root, "image", "snapshots"), d.rootfsDir(plainCtr), d.rootfsDir(usernsCtr)} {
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(d.Root, "image", "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	d.restart(t)
	d.checkNoEntry(t, secrets["plain"])

	// The attacks, by name: the setuid binary and the device nodes.
	for _, id := range []string{plainCtr, usernsCtr} {
		merged := filepath.Join(d.rootfsDir(id), "merged")
		if out, ok := asNobody(t, filepath.Join(merged, "suid")); ok {
			t.Errorf("nobody ran the image's setuid binary of container %s: %s", id, out)
		}
		for _, dev := range []string{"kmsg", "null"} {
			if _, ok := asNobody(t, "/bin/busybox", "sh", "-c", "echo x > "+filepath.Join(merged, dev)); ok {
				t.Errorf("nobody wrote to the image's device node %s of container %s", dev, id)
			}
		}
	}

	// Inside the user-namespaced pod: the rootfs is nodev.
	probe := usernsContainer("devices", ref, "sh", "-c",
		`for n in kmsg null; do (echo x > /$n) 2>/dev/null && echo opened-$n; done; `+
			`awk '$5 == "/" {print "rootfs-options=" $6}' /proc/self/mountinfo; /suid`)
	st, out := d.runToExit(t, usernsPod, usernsCfg, probe)
	t.Logf("inside the user-namespaced pod:\n%s", out)
	if st.GetExitCode() != 0 || strings.Contains(out, "opened-") || !strings.Contains(out, "euid=0") {
		t.Errorf("exit %d, output %q: want no device node opened, and the image's setuid binary working inside (euid=0)", st.GetExitCode(), out)
	}
	if opts := mountOptions(out, "rootfs-options="); !slices.Contains(opts, "nodev") {
		t.Errorf("the rootfs is mounted %v inside the pod, want nodev", opts)
	}

	// With the user-namespaced pod gone, no ACL is left on the way.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Runtime.StopPodSandbox(ctx, usernsPod); err != nil {
		t.Fatal(err)
	}
	if err := d.Runtime.RemovePodSandbox(ctx, usernsPod); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{d.Root, filepath.Join(d.Root, "image"), filepath.Join(d.Root, "image", "snapshots")} {
		_, err := unix.Getxattr(dir, "system.posix_acl_access", make([]byte, 256))
		if fi, serr := os.Stat(dir); !errors.Is(err, unix.ENODATA) || serr != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s after the user-namespaced pod's removal: ACL read %v, mode %v (%v); want no ACL, 0700", dir, err, fi.Mode().Perm(), serr)
		}
	}
}

// checkNoEntry walks the state root, the run dir and the rootfs stage as
// root, then tries every path as nobody and as the user-namespaced pod's
// root (usernsHostID), who must reach nothing, and never read plainSecret.
func (d *Daemon) checkNoEntry(t *testing.T, plainSecret string) {
	t.Helper()
	paths := allPaths(t, d.Root, d.RunDir, d.RunDir+"-rootfs")
	t.Logf("%d paths under the state root, the run dir and the rootfs stage", len(paths))
	if got := probeAs(t, nobodyUID, paths); len(got) != 0 {
		t.Errorf("nobody could (%d):\n%s", len(got), strings.Join(got, "\n"))
	}

	// The pod's root, a host uid like any other: not even the way to its
	// own rootfs (its runtime finds it on a stage, server/container_userns.go).
	snapshots, _ := filepath.Glob(filepath.Join(d.Root, "image", "snapshots", "*"))
	for _, dir := range append([]string{d.Root, filepath.Join(d.Root, "image"), filepath.Join(d.Root, "image", "snapshots")}, snapshots...) {
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: mode %v (%v), want nothing for group and others", dir, fi.Mode().Perm(), err)
		}
	}
	if got := probeAs(t, usernsHostID, paths); len(got) != 0 {
		t.Errorf("the user-namespaced pod's root (uid %d) could (%d):\n%s", usernsHostID, len(got), strings.Join(got, "\n"))
	}
	if _, ok := asUID(t, usernsHostID, "", "/bin/busybox", "cat", plainSecret); ok {
		t.Errorf("the user-namespaced pod's root read the plain pod's %s", plainSecret)
	}
}

// A binary in an image volume runs, but a setuid-root one does not raise
// privileges in a container of uid 1000, and a device node of the volume
// does not open: the volume is mounted ro,nosuid,nodev, not noexec
// (KEP-4639 dropped noexec; cri-tools checks that a volume's binary runs).
func TestImageVolumeIsReadOnlyNoSuidNoDevExec(t *testing.T) {
	d := StartDaemon(t)
	reg := registry.Start(t, registry.Options{})
	ref := reg.Host() + "/e2e/attack:v1"
	testimage.Push(t, attackImage(t), ref)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("imgvol-inert")
	pod := d.runPod(t, podCfg)

	cfg := containerConfig("runner", ref, "sh", "-c",
		`/vol/suid; echo suid-exit=$?; (echo x > /vol/null) 2>/dev/null && echo opened-null; `+
			`/vol/bin/busybox true && echo volume-binary-ran; `+
			`awk '$5 == "/vol" {print "vol-options=" $6}' /proc/self/mountinfo`)
	cfg.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{RunAsUser: &runtime.Int64Value{Value: 1000}}}
	cfg.Mounts = []*runtime.Mount{{ContainerPath: "/vol", Image: &runtime.ImageSpec{Image: ref}, Readonly: true}}
	st, out := d.runToExit(t, pod, podCfg, cfg)
	t.Logf("container output:\n%s", out)
	if st.GetExitCode() != 0 {
		t.Errorf("exit %d, output %q", st.GetExitCode(), out)
	}
	if !strings.Contains(out, "euid=1000") || strings.Contains(out, "euid=0") {
		t.Errorf("output %q: want the volume's setuid-root binary to run with euid 1000 (nosuid)", out)
	}
	if !strings.Contains(out, "volume-binary-ran") {
		t.Errorf("output %q: want a binary of the image volume to run (no noexec)", out)
	}
	if strings.Contains(out, "opened-null") {
		t.Errorf("output %q: the volume's device node opened (want nodev)", out)
	}
	opts := mountOptions(out, "vol-options=")
	for _, want := range []string{"ro", "nosuid", "nodev"} {
		if !slices.Contains(opts, want) {
			t.Errorf("the image volume is mounted %v in the container, want %s", opts, want)
		}
	}
	if slices.Contains(opts, "noexec") {
		t.Errorf("the image volume is mounted %v in the container, want no noexec", opts)
	}
}

// mountOptions returns the comma-separated options on the output line
// that starts with prefix.
func mountOptions(out, prefix string) []string {
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return strings.Split(strings.TrimSpace(rest), ",")
		}
	}
	return nil
}

// asUID runs a host command as uid (gid the same, no supplementary
// groups) with stdin, and returns its output (stderr too, unless stdin is
// given: then stdout alone) and whether it succeeded.
func asUID(t *testing.T, uid int, stdin string, name string, args ...string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	var out []byte
	var err error
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
		out, err = cmd.Output()
	} else {
		out, err = cmd.CombinedOutput()
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %v as uid %d did not finish", name, args, uid)
	}
	return string(out), err == nil
}
