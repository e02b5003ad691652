//go:build e2e

package e2e

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// withUserNamespaces readies the kubelet suite's daemon for pods with
// hostUsers: false. A standalone kubelet reads no RuntimeClass, and lets a
// pod have hostUsers: false only when the default handler reports
// user_namespaces: with its default configuration the daemon chooses
// runc-current, which make deps built, as that handler. The test's dir
// (0700, from MkdirTemp) becomes 0711 as /var/lib/minicri is, so that a
// pod's root can reach its rootfs.
func withUserNamespaces() DaemonOption {
	return func(d *Daemon) {
		requireCurrentRunc(d.t)
		if err := os.Chmod(d.Dir, 0o711); err != nil {
			d.t.Fatal(err)
		}
	}
}

// A kubelet pod with hostUsers: false and no RuntimeClass runs on a daemon
// with the default configuration (no runtime.default_handler), in a user
// namespace, on the handler chosen at start.
func TestKubeletUserNamespacePodWithoutRuntimeClass(t *testing.T) {
	n := newKubeletNode(t)
	writeUsernsPod(t, n)
	testUserNamespacePod(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := n.d.Runtime.ListPodSandbox(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	handlers := map[string]string{}
	for _, p := range pods {
		handlers[p.GetMetadata().GetName()] = p.GetRuntimeHandler()
	}
	if got := handlers[n.k.podName("userns")]; got != usernsHandler {
		t.Errorf("the kubelet's pod runs on handler %q, want %q (the default); sandboxes: %v", got, usernsHandler, handlers)
	}
}

// writeUsernsPod starts a pod with hostUsers: false and an emptyDir.
func writeUsernsPod(t *testing.T, n *kubeletNode) {
	c := n.container("c", "echo from-pod > /vol/file; "+sleepForever)
	c.VolumeMounts = []corev1.VolumeMount{{Name: "vol", MountPath: "/vol"}}
	pod := staticPod("userns", c)
	no := false
	pod.Spec.HostUsers = &no
	pod.Spec.Volumes = []corev1.Volume{{Name: "vol", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	n.k.writeManifest(t, pod)
}

// What a user checks of a pod with hostUsers: false, from inside: a uid_map
// that maps root to an unprivileged host range the kubelet picked, and the
// rootfs and a volume owned by root all the same.
func testUserNamespacePod(t *testing.T, n *kubeletNode) {
	n.k.waitPod(t, "userns", "Running", 90*time.Second, running)
	id := n.k.runningContainer(t, "userns", "c")
	out := n.execSync(t, id, "sh", "-c", "cat /proc/self/uid_map; echo rootfs=$(stat -c %u:%g / /bin /etc/hostname); echo vol=$(stat -c %u:%g /vol /vol/file); id -u")
	fields := strings.Fields(out)
	if len(fields) < 3 || fields[0] != "0" || fields[2] != "65536" {
		t.Fatalf("uid_map in the pod: %q, want 0 HOSTID 65536", out)
	}
	host, err := strconv.Atoi(fields[1])
	if err != nil || host < 65536 || host%65536 != 0 {
		t.Errorf("the pod's root is host ID %q, want an unprivileged multiple of 65536", fields[1])
	}
	for _, want := range []string{"rootfs=0:0 0:0 0:0", "vol=0:0 0:0", "\n0\n"} {
		if !strings.Contains("\n"+out, want) {
			t.Errorf("the pod sees %q, want %q in it", out, want)
		}
	}
}
