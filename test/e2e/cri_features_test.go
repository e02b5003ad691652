//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// volumeImage is a small image with known files for image volumes: two
// layers, so that the volume is an overlay of both.
func volumeImage(t *testing.T) v1.Image {
	return testimage.Image(t, []v1.Layer{
		testimage.Layer(t, testimage.Dir("data", 0o755), testimage.File("data/base", "from the base layer\n", 0o644)),
		testimage.Layer(t, testimage.Dir("data", 0o755), testimage.File("data/hello", "hello from the volume\n", 0o644),
			testimage.Dir("data/sub", 0o755), testimage.File("data/sub/deep", "deep\n", 0o644)),
	})
}

// groupsImage is busybox with app (uid 1000) a member of group extra
// (2000) in its /etc/group: what Strict leaves out.
func groupsImage(t *testing.T) v1.Image {
	return testimage.Image(t, []v1.Layer{testimage.BusyboxLayer(t),
		testimage.Layer(t, testimage.File("etc/group", "root:x:0:\napp:x:1000:\nextra:x:2000:app\n", 0o644))})
}

// imageVolumeDirs are the image store's dirs of image volumes (rootfs IDs
// CONTAINER.ivN) that exist now.
func (d *Daemon) imageVolumeDirs() []string {
	dirs, _ := filepath.Glob(filepath.Join(d.Root, "image", "snapshots", "*.iv*"))
	return dirs
}

// An image volume shows the image's files read-only, whole or a sub path;
// the image cannot be removed while a container mounts it; the container's
// removal leaves no mount and no snapshot dir, and frees the image.
func TestImageVolume(t *testing.T) {
	d, ref, vol := startImageVolumeDaemon(t)
	podCfg := d.hostNetworkPod("imgvol")
	pod := d.runPod(t, podCfg)
	ctx := context.Background()

	cfg := containerConfig("reader", ref, "sh", "-c", "cat /vol/data/base /vol/data/hello /sub/deep; touch /vol/data/new 2>/dev/null || echo vol-readonly")
	cfg.Mounts = []*runtime.Mount{
		{ContainerPath: "/vol", Image: &runtime.ImageSpec{Image: vol.ref}, Readonly: true},
		{ContainerPath: "/sub", Image: &runtime.ImageSpec{Image: vol.ref}, ImageSubPath: "data/sub", Readonly: true},
	}
	st, log := d.runToExit(t, pod, podCfg, cfg)
	for _, want := range []string{"from the base layer", "hello from the volume", "deep", "vol-readonly"} {
		if !strings.Contains(log, want) {
			t.Errorf("container output lacks %q:\n%s", want, log)
		}
	}
	for i, m := range st.GetMounts() {
		if got, want := m.GetImage().GetImage(), vol.digestRef(); got != want {
			t.Errorf("ContainerStatus.mounts[%d].image = %q, want the image's digest %q", i, got, want)
		}
		// What the kubelet shows in the pod's volume mount status.
		if got, want := m.GetImage().GetImageRef(), vol.id; got != want {
			t.Errorf("ContainerStatus.mounts[%d].image.image_ref = %q, want the image ID %q", i, got, want)
		}
	}
	if err := d.Images.RemoveImage(ctx, &runtime.ImageSpec{Image: vol.ref}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("RemoveImage of a mounted image volume: %v, want FailedPrecondition", err)
	}
	if err := d.Runtime.RemoveContainer(ctx, st.GetId()); err != nil {
		t.Fatal(err)
	}
	if dirs := d.imageVolumeDirs(); len(dirs) != 0 {
		t.Errorf("image volume dirs left after the container's removal: %v", dirs)
	}
	if m := mountsBelow(d.Root); len(m) != 0 {
		t.Errorf("mounts left below the state root: %v", m)
	}
	if err := d.Images.RemoveImage(ctx, &runtime.ImageSpec{Image: vol.ref}); err != nil {
		t.Fatalf("RemoveImage after the container went: %v", err)
	}
}

// The kubelet (and cri-tools) pulls an image volume's image, then mounts it
// by what PullImage answered; ContainerStatus reports exactly that as the
// mount's image_ref (KEP-5365), not a repo digest.
func TestImageVolumeStatusImageRefIsPullImageRef(t *testing.T) {
	d, ref, vol := startImageVolumeDaemon(t)
	pulled := d.pull(t, vol.ref)
	podCfg := d.hostNetworkPod("imgvolref")
	pod := d.runPod(t, podCfg)
	cfg := containerConfig("holder", ref, "sleep", "3600")
	cfg.Mounts = []*runtime.Mount{{ContainerPath: "/vol", Readonly: true,
		Image: &runtime.ImageSpec{Image: pulled, UserSpecifiedImage: vol.ref}}}
	ctx := context.Background()
	id, err := d.Runtime.CreateContainer(ctx, pod, cfg, podCfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := d.Runtime.ContainerStatus(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	mounts := st.GetStatus().GetMounts()
	if len(mounts) != 1 || mounts[0].GetImage().GetImageRef() != pulled {
		t.Fatalf("ContainerStatus mounts %v: want /vol with image_ref %q, what PullImage answered", mounts, pulled)
	}
	if err := d.Runtime.RemoveContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// A malformed image volume is refused with the field named, and leaves
// nothing behind.
func TestImageVolumeRefusals(t *testing.T) {
	d, ref, vol := startImageVolumeDaemon(t)
	podCfg := d.hostNetworkPod("imgvolbad")
	pod := d.runPod(t, podCfg)
	cases := []struct {
		name  string
		mount *runtime.Mount
		code  codes.Code
		field string
	}{
		{"writable", &runtime.Mount{ContainerPath: "/vol", Image: &runtime.ImageSpec{Image: vol.ref}}, codes.InvalidArgument, "config.mounts.readonly"},
		{"not pulled", &runtime.Mount{ContainerPath: "/vol", Image: &runtime.ImageSpec{Image: strings.TrimSuffix(vol.ref, "volume:v1") + "absent:v1"}, Readonly: true}, codes.NotFound, "config.mounts.image"},
		{"sub path not in the image", &runtime.Mount{ContainerPath: "/vol", Image: &runtime.ImageSpec{Image: vol.ref}, ImageSubPath: "nowhere", Readonly: true}, codes.InvalidArgument, "config.mounts.image_sub_path"},
		{"sub path that walks up", &runtime.Mount{ContainerPath: "/vol", Image: &runtime.ImageSpec{Image: vol.ref}, ImageSubPath: "../..", Readonly: true}, codes.InvalidArgument, "config.mounts.image_sub_path"},
	}
	before := d.stateFiles(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := containerConfig("bad", ref, "true")
			cfg.Mounts = []*runtime.Mount{c.mount}
			_, err := d.Runtime.CreateContainer(context.Background(), pod, cfg, podCfg)
			if status.Code(err) != c.code || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("CreateContainer: %v, want %v naming %s", err, c.code, c.field)
			}
			if after := d.stateFiles(t); after != before {
				t.Errorf("a refused image volume left state behind:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			if m := mountsBelow(d.Root); len(m) != 0 {
				t.Errorf("mounts left by a refused create: %v", m)
			}
		})
	}
}

// nestedMount makes dir/nested a tmpfs inside a host dir, unmounted when
// the test ends: what a recursive read-only mount must reach.
func nestedMount(t *testing.T) (dir string) {
	t.Helper()
	dir = t.TempDir()
	nested := filepath.Join(dir, "nested")
	if err := os.Mkdir(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", nested, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(nested, unix.MNT_DETACH) })
	return dir
}

// A recursive read-only mount keeps the mounts below its source read-only
// too, where a plain read-only one leaves them writable.
func TestRecursiveReadOnlyMount(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	handlers := d.runtimeHandlers(t)
	if !handlers[""].GetRecursiveReadOnlyMounts() || !handlers["runc"].GetRecursiveReadOnlyMounts() {
		t.Fatalf("Status: the default handler (runc) does not report recursive read-only mounts: %v", handlers)
	}
	host := nestedMount(t)
	podCfg := d.hostNetworkPod("rro")
	pod := d.runPod(t, podCfg)
	for _, c := range []struct {
		name      string
		recursive bool
		want      string
	}{
		{"recursive", true, "nested-readonly"},
		{"plain", false, "nested-writable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := containerConfig("rro-"+c.name, ref, "sh", "-c",
				"touch /m/top 2>/dev/null || echo top-readonly; if touch /m/nested/x-"+c.name+" 2>/dev/null; then echo nested-writable; else echo nested-readonly; fi")
			cfg.Mounts = []*runtime.Mount{{ContainerPath: "/m", HostPath: host, Readonly: true, RecursiveReadOnly: c.recursive}}
			_, log := d.runToExit(t, pod, podCfg, cfg)
			if !strings.Contains(log, "top-readonly") || !strings.Contains(log, c.want) {
				t.Fatalf("output %q, want top-readonly and %s", log, c.want)
			}
		})
	}
}

// runtimeHandlers are the handlers' features as Status reports them.
func (d *Daemon) runtimeHandlers(t *testing.T) map[string]*runtime.RuntimeHandlerFeatures {
	t.Helper()
	resp, err := d.Runtime.Status(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*runtime.RuntimeHandlerFeatures{}
	for _, h := range resp.GetRuntimeHandlers() {
		out[h.GetName()] = h.GetFeatures()
	}
	return out
}

// A handler whose runtime lacks rro reports no recursive read-only mounts
// and refuses one by name, rather than making a plain read-only mount.
func TestRecursiveReadOnlyRefusedWithoutRuntimeSupport(t *testing.T) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Skip("no runc")
	}
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "old-runc")
	// A runtime from before `features`: the subcommand fails.
	script := fmt.Sprintf("#!/bin/sh\n[ \"$1\" = features ] && exit 1\nexec %s \"$@\"\n", runc)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	d := StartDaemon(t, WithConfig(fmt.Sprintf("[runtime.handlers.runc]\npath = \"runc\"\n[runtime.handlers.old]\npath = %q\nroot = %q\n", wrapper, filepath.Join(dir, "old-root"))))
	ref := busyboxRef(t)
	d.pull(t, ref)
	if f := d.runtimeHandlers(t)["old"]; f == nil || f.GetRecursiveReadOnlyMounts() {
		t.Fatalf("Status: handler old reports %v, want present without recursive read-only mounts", f)
	}
	podCfg := d.hostNetworkPod("oldrro")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod, err := d.Runtime.RunPodSandbox(ctx, podCfg, "old")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.Runtime.StopPodSandbox(context.Background(), pod)
		_ = d.Runtime.RemovePodSandbox(context.Background(), pod)
	})
	cfg := containerConfig("rro", ref, "true")
	cfg.Mounts = []*runtime.Mount{{ContainerPath: "/m", HostPath: dir, Readonly: true, RecursiveReadOnly: true}}
	_, err = d.Runtime.CreateContainer(ctx, pod, cfg, podCfg)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"old"`) || !strings.Contains(err.Error(), "config.mounts.recursive_read_only") {
		t.Fatalf("CreateContainer with rro on handler old: %v, want InvalidArgument naming the handler and the field", err)
	}
}

// Strict gives the process only the groups the pod names, not those the
// image's /etc/group adds; ContainerStatus.user reports what it got.
func TestSupplementalGroupsPolicy(t *testing.T) {
	d := StartDaemon(t)
	reg := registry.Start(t, registry.Options{})
	ref := pushImage(t, reg, "groups:v1", groupsImage(t)).ref
	d.pull(t, ref)
	resp, err := d.Runtime.Status(context.Background(), false)
	if err != nil || !resp.GetFeatures().GetSupplementalGroupsPolicy() {
		t.Fatalf("Status features %v (%v), want supplemental_groups_policy", resp.GetFeatures(), err)
	}
	podCfg := d.hostNetworkPod("groups")
	pod := d.runPod(t, podCfg)
	for _, c := range []struct {
		policy runtime.SupplementalGroupsPolicy
		groups []int64
		want   string
	}{
		{runtime.SupplementalGroupsPolicy_Merge, []int64{1000, 2000, 4000}, "uid=1000(app) gid=1000(app) groups=1000(app),2000(extra),4000"},
		{runtime.SupplementalGroupsPolicy_Strict, []int64{1000, 4000}, "uid=1000(app) gid=1000(app) groups=1000(app),4000"},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			cfg := containerConfig("id-"+strings.ToLower(c.policy.String()), ref, "sh", "-c", "id; sleep 300")
			cfg.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
				RunAsUser: &runtime.Int64Value{Value: 1000}, SupplementalGroups: []int64{4000}, SupplementalGroupsPolicy: c.policy}}
			id := d.startContainer(t, pod, podCfg, cfg)
			var log string
			waitFor(t, "the output of id", 20*time.Second, func() bool {
				log = readLog(t, d.status(t, id).GetLogPath())
				return strings.Contains(log, "uid=")
			})
			if strings.TrimSpace(log) != c.want {
				t.Errorf("id = %q, want %q", strings.TrimSpace(log), c.want)
			}
			u := d.status(t, id).GetUser().GetLinux()
			if u.GetUid() != 1000 || u.GetGid() != 1000 || !slices.Equal(u.GetSupplementalGroups(), c.groups) {
				t.Errorf("ContainerStatus.user = %v, want uid 1000 gid 1000 groups %v", u, c.groups)
			}
		})
	}
}

// ContainerStatus carries what the kubelet reads of a container besides its
// state: image ID and ref, the stop signal as resolved (here the image's),
// the user, the resources.
func TestContainerStatusComplete(t *testing.T) {
	d := StartDaemon(t)
	reg := registry.Start(t, registry.Options{})
	p := pushImage(t, reg, "stopsig:v1", testimage.Busybox(t, testimage.WithStopSignal("SIGUSR1"), testimage.WithUser("app")))
	d.pull(t, p.ref)
	podCfg := d.hostNetworkPod("complete")
	pod := d.runPod(t, podCfg)
	cfg := containerConfig("c", p.ref, "sleep", "300")
	cfg.Linux = &runtime.LinuxContainerConfig{Resources: &runtime.LinuxContainerResources{MemoryLimitInBytes: 64 << 20}}
	id := d.startContainer(t, pod, podCfg, cfg)
	st := d.status(t, id)
	if st.GetImageId() != p.id || st.GetImageRef() != p.digestRef() {
		t.Errorf("image_id %q image_ref %q, want %q and %q", st.GetImageId(), st.GetImageRef(), p.id, p.digestRef())
	}
	if st.GetStopSignal() != runtime.Signal_SIGNAL_SIGUSR1 {
		t.Errorf("stop_signal = %v, want the image's SIGUSR1", st.GetStopSignal())
	}
	if u := st.GetUser().GetLinux(); u.GetUid() != 1000 || u.GetGid() != 1000 {
		t.Errorf("user = %v, want the image's app (1000:1000)", u)
	}
	if got := st.GetResources().GetLinux().GetMemoryLimitInBytes(); got != 64<<20 {
		t.Errorf("resources memory limit = %d, want %d", got, 64<<20)
	}
}

// A daemon killed while it creates a container with an image volume rolls
// the create back at start: no mount, no snapshot dir, and the image is
// free again. A container that was made keeps its volume over a restart.
func TestImageVolumeOverCrashAndRestart(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	ref := reg.Host() + "/e2e/busybox:latest"
	testimage.Push(t, testimage.Busybox(t), ref)
	vol := pushImage(t, reg, "volume:v1", volumeImage(t))
	withVolume := func(name string) *runtime.ContainerConfig {
		cfg := containerConfig(name, ref, "sh", "-c", "cat /vol/data/hello; sleep 300")
		cfg.Mounts = []*runtime.Mount{{ContainerPath: "/vol", Image: &runtime.ImageSpec{Image: vol.ref}, Readonly: true}}
		return cfg
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	d := startDaemonCrashingAt(t, "container-after-bundle")
	d.pull(t, ref)
	d.pull(t, vol.ref)
	podCfg := d.hostNetworkPod("volcrash")
	pod := d.runPod(t, podCfg)
	if _, err := d.Runtime.CreateContainer(ctx, pod, withVolume("cut"), podCfg); err == nil {
		t.Fatal("CreateContainer succeeded through its crash point")
	}
	d.waitCrashed(t, "container-after-bundle")
	d.Start()
	d.assertNoContainerLeft(t)

	// The restarted daemon has no crash point armed.
	id := d.startContainer(t, pod, podCfg, withVolume("kept"))
	d.kill9(t)
	d.Start()
	if dirs := d.imageVolumeDirs(); len(dirs) != 1 {
		t.Fatalf("image volume dirs after a restart: %v, want the running container's one", dirs)
	}
	if err := d.Images.RemoveImage(ctx, &runtime.ImageSpec{Image: vol.ref}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("RemoveImage under a container's volume after a restart: %v, want FailedPrecondition", err)
	}
	if err := d.Runtime.StopContainer(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Runtime.RemoveContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	d.assertNoContainerLeft(t)
	if err := d.Images.RemoveImage(ctx, &runtime.ImageSpec{Image: vol.ref}); err != nil {
		t.Fatalf("RemoveImage after the container went: %v", err)
	}
}

// Verbose Status, what `crictl info` prints, reports each handler's
// recursive read-only mounts exactly when that handler's runtime lists rro
// in its features (crun may be missing here: then it has none; runc-current
// is the current runc of hack/build-runc.sh), and the
// supplemental groups policy for the whole runtime.
func TestStatusReportsFeaturesPerHandler(t *testing.T) {
	d := StartDaemon(t)
	resp, err := d.Runtime.Status(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetFeatures().GetSupplementalGroupsPolicy() {
		t.Errorf("features = %v, want supplemental_groups_policy", resp.GetFeatures())
	}
	runtimeHasRRO := func(binary string) bool {
		out, err := exec.Command(binary, "features").Output()
		return err == nil && strings.Contains(string(out), `"rro"`)
	}
	want := map[string]bool{"": runtimeHasRRO("runc"), "runc": runtimeHasRRO("runc"), "crun": runtimeHasRRO("crun"), usernsHandler: runtimeHasRRO(currentRunc)}
	if !want["runc"] {
		t.Fatal("runc here lists no rro in `runc features`: this test needs runc 1.1 or later")
	}
	var names []string
	for _, h := range resp.GetRuntimeHandlers() {
		names = append(names, h.GetName())
		if got := h.GetFeatures().GetRecursiveReadOnlyMounts(); got != want[h.GetName()] {
			t.Errorf("handler %q: recursive_read_only_mounts = %v, want %v (what its runtime's features say)", h.GetName(), got, want[h.GetName()])
		}
	}
	if !slices.Equal(names, []string{"", "crun", "runc", usernsHandler}) {
		t.Errorf("handlers %q, want the default and each configured one", names)
	}
}

// startImageVolumeDaemon starts a daemon with busybox and the volume image
// (volumeImage) pulled from a registry of the test's own.
func startImageVolumeDaemon(t *testing.T) (d *Daemon, busybox string, vol pushedImage) {
	t.Helper()
	d = StartDaemon(t)
	reg := registry.Start(t, registry.Options{})
	busybox = reg.Host() + "/e2e/busybox:latest"
	testimage.Push(t, testimage.Busybox(t), busybox)
	vol = pushImage(t, reg, "volume:v1", volumeImage(t))
	d.pull(t, busybox)
	d.pull(t, vol.ref)
	return d, busybox, vol
}
