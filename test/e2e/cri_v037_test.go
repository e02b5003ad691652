//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// The CRI v0.37 features: bind mount options (KEP-5855), user
// namespaces on the host's network (KEP-5607), OCI artifacts as image
// volumes.

// mountFlags are the per-mount options of dest in a container's
// /proc/self/mountinfo text (the sixth field), or nil.
func mountFlags(mountinfo, dest string) []string {
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == dest {
			return strings.Split(f[5], ",")
		}
	}
	return nil
}

// A noexec bind mount refuses to run a binary that a plain one runs, an rw
// bind with nosuid keeps nosuid (and stays rw), a read-only one takes all
// three in the same remount; on Debian's runc 1.1.5 and on runc 1.5.2. An
// option that would give back what the node withholds is refused, naming
// the field.
func TestBindMountOptions(t *testing.T) {
	requireCurrentRunc(t)
	d := StartDaemon(t)
	d.bridgeNetwork(t)
	ref := busyboxRef(t)
	d.pull(t, ref)

	resp, err := d.Runtime.Status(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetFeatures().GetMountOptions() {
		t.Errorf("Status features %v: want mount_options", resp.GetFeatures())
	}
	var perHandler map[string]struct{ MountOptions []string }
	if err := json.Unmarshal([]byte(resp.GetInfo()["runtimeHandlerFeatures"]), &perHandler); err != nil {
		t.Fatalf("runtimeHandlerFeatures %q: %v", resp.GetInfo()["runtimeHandlerFeatures"], err)
	}

	for _, handler := range []string{"runc", usernsHandler} {
		t.Run(handler, func(t *testing.T) {
			if got := perHandler[handler].MountOptions; !slices.Equal(got, []string{"noexec", "nodev", "nosuid"}) {
				t.Errorf("verbose Status: handler %s mount options %v, want noexec nodev nosuid", handler, got)
			}
			cfg := d.podConfig("bind-options")
			podID := d.runPodOn(t, cfg, handler)
			ctr := containerConfig("check", ref, "sh", "-c",
				// busybox runs the applet its name says.
				`cp /bin/busybox /plain/true && cp /bin/busybox /noexec/true && `+
					`{ /plain/true && echo plain=ran || echo plain=refused; }; `+
					`{ /noexec/true 2>/dev/null && echo noexec=ran || echo noexec=refused; }; `+
					`echo written > /nosuid/f && echo nosuid=writable; cat /proc/self/mountinfo`)
			ctr.Mounts = []*runtime.Mount{
				{ContainerPath: "/plain", HostPath: t.TempDir()},
				{ContainerPath: "/noexec", HostPath: t.TempDir(), MountOptions: []string{"noexec"}},
				{ContainerPath: "/nosuid", HostPath: t.TempDir(), MountOptions: []string{"nosuid"}},
				{ContainerPath: "/ro", HostPath: t.TempDir(), Readonly: true, MountOptions: []string{"noexec", "nodev", "nosuid"}},
			}
			st, out := d.runToExit(t, podID, cfg, ctr)
			if st.GetExitCode() != 0 {
				t.Fatalf("container exited %d:\n%s", st.GetExitCode(), out)
			}
			for _, want := range []string{"plain=ran", "noexec=refused", "nosuid=writable"} {
				if !strings.Contains(out, want+"\n") {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			for dest, want := range map[string][]string{
				"/plain":  {"rw"},
				"/noexec": {"rw", "noexec"},
				"/nosuid": {"rw", "nosuid"},
				"/ro":     {"ro", "nosuid", "nodev", "noexec"},
			} {
				got := mountFlags(out, dest)
				for _, w := range want {
					if !slices.Contains(got, w) {
						t.Errorf("%s mounted %v, want %v in it", dest, got, want)
					}
				}
				if dest == "/plain" && (slices.Contains(got, "noexec") || slices.Contains(got, "nosuid")) {
					t.Errorf("/plain mounted %v: options of another mount leaked onto it", got)
				}
			}

			// Nothing that takes a protection away.
			for _, opt := range []string{"exec", "suid", "dev", "rw"} {
				bad := containerConfig("bad-"+opt, ref, "true")
				bad.Mounts = []*runtime.Mount{{ContainerPath: "/data", HostPath: t.TempDir(), Readonly: true, MountOptions: []string{"nosuid", opt}}}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := d.Runtime.CreateContainer(ctx, podID, bad, cfg)
				cancel()
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "config.mounts.mount_options") {
					t.Errorf("CreateContainer with mount option %q = %v, want InvalidArgument naming config.mounts.mount_options", opt, err)
				}
			}
		})
	}
}

// A hostNetwork pod with hostUsers: false (KEP-5607) runs in its own user
// namespace with its mapped IDs, on the host's network and UTS namespaces:
// it sees the host's interfaces in /sys/class/net, the host's /sys read-only.
func TestUserNamespaceHostNetworkPod(t *testing.T) {
	d, ref := startUsernsDaemon(t)
	resp, err := d.Runtime.Status(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetFeatures().GetUserNamespacesHostNetwork() {
		t.Errorf("Status features %v: want user_namespaces_host_network", resp.GetFeatures())
	}

	cfg := d.usernsPodConfig("userns-hostnet")
	cfg.Linux.SecurityContext.NamespaceOptions.Network = runtime.NamespaceMode_NODE
	podID := d.runPodOn(t, cfg, usernsHandler)
	ctr := containerConfig("check", ref, "sh", "-c",
		`cat /proc/self/uid_map; echo id=$(id -u); echo net=$(readlink /proc/self/ns/net); echo host=$(hostname); `+
			`echo ifaces=$(ls /sys/class/net | tr '\n' ' '); echo lo=$(cat /sys/class/net/lo/operstate); `+
			`cat /proc/self/mountinfo`)
	ctr.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
		NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE, Pid: runtime.NamespaceMode_CONTAINER, UsernsOptions: usernsOptions()},
	}}
	// A volume as the kubelet sends it for such a pod: idmapped, and here
	// with bind options too, which the remount after the idmap keeps.
	u := usernsOptions()
	ctr.Mounts = []*runtime.Mount{{ContainerPath: "/data", HostPath: t.TempDir(), UidMappings: u.Uids, GidMappings: u.Gids, MountOptions: []string{"noexec", "nosuid"}}}
	st, out := d.runToExit(t, podID, cfg, ctr)
	if st.GetExitCode() != 0 {
		t.Fatalf("container exited %d:\n%s", st.GetExitCode(), out)
	}
	if f := strings.Fields(out); len(f) < 3 || strings.Join(f[:3], " ") != "0 3145728 65536" {
		t.Errorf("uid_map = %q, want 0 3145728 65536", f)
	}
	hostNet, _ := os.Readlink("/proc/self/ns/net")
	hostName, _ := os.Hostname()
	for _, want := range []string{"id=0", "net=" + hostNet, "host=" + hostName, "lo=unknown"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The host's own interfaces: lo and that of its default route (other
	// tests' veths come and go meanwhile).
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "ifaces=") {
			line = " " + strings.TrimPrefix(l, "ifaces=") + " "
		}
	}
	for _, name := range []string{"lo", defaultRouteInterface(t)} {
		if !strings.Contains(line, " "+name+" ") {
			t.Errorf("/sys/class/net in the pod lists %q, without the host's %s", line, name)
		}
	}
	if got := mountFlags(out, "/sys"); !slices.Contains(got, "ro") || !slices.Contains(got, "nosuid") {
		t.Errorf("/sys mounted %v, want ro and nosuid", got)
	}
	if got := mountFlags(out, "/data"); !slices.Contains(got, "rw") || !slices.Contains(got, "noexec") || !slices.Contains(got, "nosuid") || !strings.Contains(out, "idmapped") {
		t.Errorf("/data mounted %v, want rw, noexec, nosuid and idmapped", got)
	}

	// The pod has no network pin to find again after a daemon SIGKILL: it
	// stays ready, and a container of it still runs on the host's network.
	sleeper := containerConfig("sleeper", ref, "sleep", "3600")
	sleeper.Linux = ctr.Linux
	id := d.startContainer(t, podID, cfg, sleeper)
	d.kill9(t)
	d.Start()
	resp2, err := d.Runtime.PodSandboxStatus(context.Background(), podID, false)
	if err != nil || resp2.GetStatus().GetState() != runtime.PodSandboxState_SANDBOX_READY {
		t.Fatalf("pod after the restart: %v, %v; want ready", resp2.GetStatus().GetState(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stdout, stderr, err := d.Runtime.ExecSync(ctx, id, []string{"readlink", "/proc/self/ns/net"}, 10*time.Second)
	if err != nil || strings.TrimSpace(string(stdout)) != hostNet {
		t.Errorf("after the restart the container's network namespace is %q (%v, %s), want the host's %s", stdout, err, stderr, hostNet)
	}
}

// defaultRouteInterface is the host's interface of its IPv4 default route.
func defaultRouteInterface(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/proc/net/route")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 2 && f[1] == "00000000" {
			return f[0]
		}
	}
	t.Fatal("the host has no IPv4 default route")
	return ""
}

// An OCI artifact pushed to a registry (a small file layer with a title, as
// oras pushes one) pulls as an image whose ID is its own (not its manifest
// digest, nor any blob's digest: images_ids_test.go),
// appears in a container as a read-only file of its image volume, counts in
// ImageFsInfo, cannot be a container's image, and goes with RemoveImage.
func TestOCIArtifactImageVolume(t *testing.T) {
	d, busybox, _ := startImageVolumeDaemon(t)
	reg := registry.Start(t, registry.Options{})
	weights := "weights v1\n" + strings.Repeat("w", 256<<10)
	art := testimage.Artifact(t, "application/vnd.example.model.v1",
		testimage.ArtifactFile{Title: "model.bin", Content: weights},
		testimage.ArtifactFile{Title: "README", Content: "a tiny model\n"})
	ref := reg.Host() + "/e2e/model:v1"
	digest := testimage.Push(t, art, ref)

	before := d.fsUsage(t).GetUsedBytes().GetValue()
	id := d.pull(t, ref)
	if !strings.HasPrefix(id, "sha256:") || id == digest {
		t.Fatalf("PullImage of an artifact answered %q, want an ID of its own, not its manifest digest %s", id, digest)
	}
	if st := d.imageStatus(t, ref, false).GetImage(); st.GetId() != id || !slices.Contains(st.GetRepoDigests(), reg.Host()+"/e2e/model@"+digest) {
		t.Fatalf("ImageStatus of the artifact: %v; want ID %s and its manifest digest among its repo digests", st, id)
	}
	after := d.fsUsage(t).GetUsedBytes().GetValue()
	if after < before+uint64(len(weights)) {
		t.Errorf("ImageFsInfo used bytes %d before the pull, %d after: want %d more at least", before, after, len(weights))
	}

	podCfg := d.hostNetworkPod("artifact")
	pod := d.runPod(t, podCfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	asRoot := containerConfig("as-root", ref, "true")
	if _, err := d.Runtime.CreateContainer(ctx, pod, asRoot, podCfg); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "config.image.image") {
		t.Errorf("CreateContainer with an artifact as its image = %v, want InvalidArgument naming config.image.image", err)
	}

	cfg := containerConfig("reader", busybox, "sh", "-c",
		`echo files=$(ls /model | tr '\n' ' '); head -n 1 /model/model.bin; echo size=$(wc -c < /model/model.bin); cat /model/README; `+
			`{ touch /model/new 2>/dev/null && echo writable || echo read-only; }; { echo x >> /model/model.bin 2>/dev/null && echo appended || echo kept; }`)
	cfg.Mounts = []*runtime.Mount{{ContainerPath: "/model", Image: &runtime.ImageSpec{Image: id}, Readonly: true}}
	st, out := d.runToExit(t, pod, podCfg, cfg)
	if st.GetExitCode() != 0 {
		t.Fatalf("container exited %d:\n%s", st.GetExitCode(), out)
	}
	for _, want := range []string{"files=README model.bin", "weights v1", fmt.Sprintf("size=%d", len(weights)), "a tiny model", "read-only", "kept"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if err := d.Runtime.RemoveContainer(ctx, st.GetId()); err != nil {
		t.Fatal(err)
	}

	if err := d.Images.RemoveImage(ctx, &runtime.ImageSpec{Image: ref}); err != nil {
		t.Fatalf("RemoveImage of the artifact: %v", err)
	}
	if st, err := d.Images.ImageStatus(ctx, &runtime.ImageSpec{Image: id}, false); err != nil || st.GetImage() != nil {
		t.Errorf("ImageStatus after RemoveImage: %v, %v; want no image", st.GetImage(), err)
	}
	waitFor(t, "ImageFsInfo to drop the artifact's bytes", 30*time.Second, func() bool {
		return d.fsUsage(t).GetUsedBytes().GetValue()+uint64(len(weights)) <= after
	})
}

// Through the real kubelet, with the alpha gates of both features on: a
// static pod with hostNetwork, hostUsers: false and an emptyDir whose
// volumeMount has bindMountOptions runs in a user namespace of its own on
// the host's network, its volume noexec and nosuid. The kubelet sends the
// pod only because Status reports user_namespaces_host_network, and the
// options only because it reports mount_options. And a pod with an OCI
// artifact as its image volume (the volumes[].image a user writes for model
// weights) reads the artifact's file.
func TestKubeletCRIv037Features(t *testing.T) {
	kubeletBinary(t)
	d := StartDaemon(t, withUserNamespaces())
	d.bridgeNetwork(t)
	reg := registry.Start(t, registry.Options{})
	n := &kubeletNode{d: d, ref: reg.Host() + "/e2e/busybox:latest"}
	testimage.Push(t, testimage.Busybox(t), n.ref)
	modelRef := reg.Host() + "/e2e/model:v1"
	testimage.Push(t, testimage.Artifact(t, "application/vnd.example.model.v1",
		testimage.ArtifactFile{Title: "weights.bin", Content: "weights for the kubelet\n"}), modelRef)
	n.k = startKubelet(t, d, "--feature-gates=VolumeBindMountOptions=true,UserNamespacesHostNetworkSupport=true,NodeDeclaredFeatures=true")

	c := n.container("c", sleepForever)
	c.VolumeMounts = []corev1.VolumeMount{{Name: "vol", MountPath: "/vol", BindMountOptions: []string{"noexec", "nosuid"}}}
	pod := staticPod("hostnet-userns", c)
	no := false
	pod.Spec.HostNetwork, pod.Spec.HostUsers = true, &no
	pod.Spec.Volumes = []corev1.Volume{{Name: "vol", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	n.k.writeManifest(t, pod)

	reader := n.container("reader", sleepForever)
	reader.VolumeMounts = []corev1.VolumeMount{{Name: "model", MountPath: "/model", ReadOnly: true}}
	modelPod := staticPod("model", reader)
	modelPod.Spec.Volumes = []corev1.Volume{{Name: "model", VolumeSource: corev1.VolumeSource{
		Image: &corev1.ImageVolumeSource{Reference: modelRef, PullPolicy: corev1.PullIfNotPresent}}}}
	n.k.writeManifest(t, modelPod)

	n.k.waitPod(t, "hostnet-userns", "Running", 90*time.Second, running)
	id := n.k.runningContainer(t, "hostnet-userns", "c")
	out := n.execSync(t, id, "sh", "-c", "cat /proc/self/uid_map; echo net=$(readlink /proc/self/ns/net); echo lo=$(cat /sys/class/net/lo/operstate); cat /proc/self/mountinfo")
	if f := strings.Fields(out); len(f) < 3 || f[0] != "0" || f[1] == "0" || f[2] != "65536" {
		t.Errorf("uid_map in the pod: %q, want 0 HOSTID 65536 with an unprivileged HOSTID", out)
	}
	hostNet, _ := os.Readlink("/proc/self/ns/net")
	for _, want := range []string{"net=" + hostNet, "lo=unknown"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("the pod sees %q, want %q in it", out, want)
		}
	}
	if got := mountFlags(out, "/vol"); !slices.Contains(got, "noexec") || !slices.Contains(got, "nosuid") {
		t.Errorf("/vol mounted %v, want noexec and nosuid (bindMountOptions)", got)
	}

	n.k.waitPod(t, "model", "Running", 90*time.Second, running)
	id = n.k.runningContainer(t, "model", "reader")
	if got := n.execSync(t, id, "cat", "/model/weights.bin"); got != "weights for the kubelet\n" {
		t.Errorf("the artifact's file in the pod reads %q", got)
	}
}
