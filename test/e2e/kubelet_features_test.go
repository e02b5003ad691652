//go:build e2e

package e2e

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/minicri/minicri/test/testimage"
)

// The node features the kubelet turns on from minicri's Status (on by
// default in v1.37: ImageVolume and SupplementalGroupsPolicy are GA), each
// used by a pod of the kubelet suite and checked from inside the container.
//
// Recursive read-only mounts are not among them: a kubelet without an API
// server has no RuntimeClass manager, and then takes every handler for one
// without the feature (runtimeClassSupportsRecursiveReadOnlyMounts), so it
// refuses recursiveReadOnly: Enabled itself, whatever Status reports.
// TestRecursiveReadOnlyMount shows them through the CRI instead.

// featurePods are what writeFeaturePods made for testNodeFeatures.
type featurePods struct {
	volumeRef string // the image the image volume mounts
}

// writeFeaturePods writes the pods: an image volume (whole and a sub path),
// and supplementalGroupsPolicy: Strict with an image whose /etc/group adds
// a group. Their images go to the suite's registry.
func writeFeaturePods(t *testing.T, n *kubeletNode) featurePods {
	t.Helper()
	registryHost, _, _ := strings.Cut(n.ref, "/")
	f := featurePods{volumeRef: registryHost + "/e2e/volume:v1"}
	testimage.Push(t, volumeImage(t), f.volumeRef)
	groupsRef := registryHost + "/e2e/groups:v1"
	testimage.Push(t, groupsImage(t), groupsRef)

	reader := n.container("reader", sleepForever)
	reader.VolumeMounts = []corev1.VolumeMount{
		{Name: "models", MountPath: "/vol", ReadOnly: true},
		// No readOnly: the kubelet's image volume plugin makes every
		// mount of it read-only, as minicri requires.
		{Name: "models", MountPath: "/sub", SubPath: "data/sub"},
	}
	imagePod := staticPod("imagevolume", reader)
	imagePod.Spec.Volumes = []corev1.Volume{{Name: "models", VolumeSource: corev1.VolumeSource{
		Image: &corev1.ImageVolumeSource{Reference: f.volumeRef, PullPolicy: corev1.PullIfNotPresent}}}}
	n.k.writeManifest(t, imagePod)

	uid := int64(1000)
	strict := corev1.SupplementalGroupsPolicyStrict
	member := n.container("member", sleepForever)
	member.Image = groupsRef
	strictPod := staticPod("strict", member)
	strictPod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid, SupplementalGroups: []int64{4000}, SupplementalGroupsPolicy: &strict}
	n.k.writeManifest(t, strictPod)
	return f
}

func testNodeFeatures(t *testing.T, n *kubeletNode, f featurePods) {
	for _, name := range []string{"imagevolume", "strict"} {
		n.k.waitPod(t, name, "Running with every container running", 60*time.Second, running)
	}
	t.Run("ImageVolume", func(t *testing.T) {
		id := n.k.runningContainer(t, "imagevolume", "reader")
		if got := n.execSync(t, id, "cat", "/vol/data/base", "/vol/data/hello", "/sub/deep"); got != "from the base layer\nhello from the volume\ndeep\n" {
			t.Errorf("the image volume's files read %q", got)
		}
		if code := execCode(t, n, id, "touch", "/vol/data/new"); code == 0 {
			t.Error("a write into the image volume succeeded")
		}
		st, err := n.d.Runtime.ContainerStatus(context.Background(), id, false)
		if err != nil {
			t.Fatal(err)
		}
		var images []string
		for _, m := range st.GetStatus().GetMounts() {
			if m.GetImage() != nil {
				images = append(images, m.GetImage().GetImage())
			}
		}
		if len(images) != 2 || !strings.Contains(images[0], "@sha256:") || images[0] != images[1] {
			t.Errorf("ContainerStatus mounts name images %v, want the volume image's digest twice", images)
		}
	})
	t.Run("StrictSupplementalGroups", func(t *testing.T) {
		id := n.k.runningContainer(t, "strict", "member")
		if got, want := strings.TrimSpace(n.execSync(t, id, "id")), "uid=1000(app) gid=1000(app) groups=1000(app),4000"; got != want {
			t.Errorf("id = %q, want %q: not the image's group extra (2000)", got, want)
		}
		// The kubelet reports what the runtime says the process got.
		p := n.k.pod(t, "strict")
		u := containerStatus(p, "member").User
		if u == nil || u.Linux == nil || u.Linux.UID != 1000 || u.Linux.GID != 1000 || !slices.Equal(u.Linux.SupplementalGroups, []int64{1000, 4000}) {
			t.Errorf("pod status user = %+v, want uid 1000 gid 1000 groups [1000 4000]", u)
		}
	})
}

// execCode runs cmd in a container through the daemon and returns its exit
// code, failing the test when it cannot run.
func execCode(t *testing.T, n *kubeletNode, id string, cmd ...string) int {
	t.Helper()
	_, _, err := n.d.Runtime.ExecSync(context.Background(), id, cmd, 10*time.Second)
	var exit interface{ ExitStatus() int }
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitStatus()
	}
	t.Fatalf("ExecSync %v: %v", cmd, err)
	return -1
}
