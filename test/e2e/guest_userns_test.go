//go:build e2e && guest

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// guestUsernsKernel is what a pod in a user namespace needs of the kernel
// (minicri's userNamespaceKernelFeatures): where the guest's kernel lacks
// one, Status does not advertise user namespaces and such a pod is refused.
var guestUsernsKernel = []string{"idmappedTmpfs", "idmappedOverlay"}

// guestUsernsPod is a static pod with hostUsers: false: an emptyDir at
// /vol, a file named marker written to the rootfs and to the volume.
const guestUsernsPod = `apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
spec:
  hostUsers: false
  hostNetwork: %t
  containers:
  - name: c
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", "echo secret >/%s; echo secret >/vol/%s; touch /tmp/ready; exec sleep 3600"]
    volumeMounts:
    - name: vol
      mountPath: /vol
  volumes:
  - name: vol
    emptyDir: {}
`

// TestGuestKubeletUserNamespace runs the kubelet v1.37.2 on its defaults
// under systemd and cgroup v2 with two static pods of hostUsers: false, one
// on the pod network and one on the host's (KEP-5607; the kubelet refuses
// that one unless its alpha gate UserNamespacesHostNetworkSupport is on, so
// that gate is the one setting added). In each: root is mapped to an
// unprivileged host range of 65536 IDs the kubelet picked, the image's files
// and the volume are root's all the same (idmapped layers and an idmapped
// bind mount), and what the pod writes to its rootfs lands on the host as
// the pod's host IDs. And no unprivileged host user reaches what the pods
// wrote: a walk of the whole node as nobody finds none of it, where root
// finds it in the rootfs's upper dir and in the volume.
func TestGuestKubeletUserNamespace(t *testing.T) {
	g, d := guestTest(t)
	g.needsKernel(t, d, guestUsernsKernel...)
	g.startKubelet(t, d, "featureGates:\n  UserNamespacesHostNetworkSupport: true\n")

	marker := "minicri-e2e-userns-" + randomHex(8)
	pods := map[string]bool{"userns-podnet": false, "userns-hostnet": true}
	for name, hostNet := range pods {
		g.WriteFile(t, "/etc/kubernetes/manifests/"+name+".yaml",
			[]byte(fmt.Sprintf(guestUsernsPod, name, hostNet, guestBusyboxRef, marker, marker)), 0o644)
	}
	hostIDs := map[string]int{}
	for name, hostNet := range pods {
		// Running, not Ready: an exec probe's one-second timeout does not
		// hold under TCG with two pods starting.
		pod := g.waitKubeletPod(t, name, "Running", g.Timeout(2*time.Minute), running)
		ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(30*time.Second))
		cs, err := d.Runtime.ListContainers(ctx, &runtime.ContainerFilter{
			State:         &runtime.ContainerStateValue{State: runtime.ContainerState_CONTAINER_RUNNING},
			LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(pod.UID)}})
		cancel()
		if err != nil || len(cs) != 1 {
			t.Fatalf("%s: the running containers in minicri: %v %v", name, cs, err)
		}
		id := cs[0].GetId()
		g.waitFor(t, name+" to write its files", g.Timeout(30*time.Second), func() bool {
			_, _, code := g.execSync(t, d, id, "test", "-e", "/tmp/ready")
			return code == 0
		})
		hostIDs[name] = g.checkUsernsContainer(t, d, name, id, string(pod.UID), marker)
		links, _, _ := g.execSync(t, d, id, "ls", "/sys/class/net")
		hostLinks := g.Run(t, "ls /sys/class/net")
		if onHost := links == hostLinks; onHost != hostNet {
			t.Errorf("%s: sees the links %q, the node has %q; want the node's: %t", name, links, hostLinks, hostNet)
		}
		if hostNet && pod.Status.PodIP != "" && !strings.Contains(g.Run(t, "ip -o addr"), pod.Status.PodIP+"/") {
			t.Errorf("%s: pod IP %s is not one of the node's addresses", name, pod.Status.PodIP)
		}
	}
	if hostIDs["userns-podnet"] == hostIDs["userns-hostnet"] {
		t.Errorf("both pods have host ID %d: the kubelet gives each pod a range of its own", hostIDs["userns-podnet"])
	}

	// What the pods wrote: root finds it, nobody must not.
	walk := fmt.Sprintf(`find / \( -path /proc -o -path /sys -o -path /mnt/host \) -prune -o -name %s -print 2>/dev/null; true`, marker)
	asRoot := strings.Fields(g.Run(t, walk))
	if len(asRoot) < 4 {
		t.Errorf("root finds %d files the pods wrote, want at least 4 (two rootfs upper dirs, two volumes): %v", len(asRoot), asRoot)
	}
	if asNobody := strings.TrimSpace(g.Run(t, "setpriv --reuid=65534 --regid=65534 --clear-groups sh -c "+shellQuote(walk))); asNobody != "" {
		t.Errorf("nobody reaches what the user-namespaced pods wrote:\n%s", asNobody)
	}
}

// checkUsernsContainer checks a running container of the kubelet's
// hostUsers: false pod podUID that wrote marker to / and /vol
// (guestUsernsPod), and returns the host ID its root is mapped to.
func (g *Guest) checkUsernsContainer(t *testing.T, d *Daemon, name, id, podUID, marker string) int {
	t.Helper()
	out, errOut, code := g.execSync(t, d, id, "sh", "-c",
		"cat /proc/self/uid_map /proc/self/gid_map; echo id=$(id -u):$(id -g); "+
			"echo rootfs=$(stat -c %u:%g / /bin/busybox /etc/hostname /"+marker+"); echo vol=$(stat -c %u:%g /vol /vol/"+marker+")")
	if code != 0 {
		t.Fatalf("%s: exec in the container: exit %d: %s%s", name, code, out, errOut)
	}
	f := strings.Fields(out)
	if len(f) < 6 || f[0] != "0" || f[2] != "65536" || strings.Join(f[:3], " ") != strings.Join(f[3:6], " ") {
		t.Fatalf("%s: uid_map and gid_map %q, want both 0 HOSTID 65536", name, out)
	}
	host, err := strconv.Atoi(f[1])
	if err != nil || host < 65536 || host%65536 != 0 {
		t.Errorf("%s: the pod's root is host ID %q, want an unprivileged multiple of 65536", name, f[1])
	}
	// Without idmapped layers the image's files would be nobody's
	// (65534) in the pod; without an idmapped volume, the volume too.
	for _, want := range []string{"id=0:0", "rootfs=0:0 0:0 0:0 0:0", "vol=0:0 0:0"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("%s: the pod sees %q, want %q in it", name, out, want)
		}
	}
	pid := strings.TrimSpace(g.ReadFile(t, "/run/minicri/containers/"+id+"/pid"))
	mounts := g.ReadFile(t, "/proc/"+pid+"/mountinfo")
	volIDMapped := false
	for _, line := range strings.Split(mounts, "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[4] == "/vol" {
			volIDMapped = strings.Contains(","+f[5]+",", ",idmapped,")
		}
	}
	if !volIDMapped {
		t.Errorf("%s: /vol is not an idmapped mount in the container:\n%s", name, mounts)
	}
	// On the node, the volume's file is the volume's root's (the mapping
	// works both ways) and the rootfs's is the pod's host root's.
	owners := g.Run(t, fmt.Sprintf(`find / \( -path /proc -o -path /sys -o -path /mnt/host \) -prune -o -name %s -printf '%%u:%%g %%p\n' 2>/dev/null; true`, marker))
	var inVol, inUpper bool
	for _, line := range strings.Split(strings.TrimSpace(owners), "\n") {
		owner, path, _ := strings.Cut(line, " ")
		switch {
		case strings.HasPrefix(path, "/var/lib/kubelet/pods/"+podUID+"/volumes/kubernetes.io~empty-dir/vol/"):
			inVol = true
			if owner != "root:root" {
				t.Errorf("%s: the volume's file %s is %s on the node, want root:root", name, path, owner)
			}
		case strings.Contains(path, "/snapshots/"+id+"/upper/"):
			inUpper = true
			if want := fmt.Sprintf("%d:%d", host, host); owner != want {
				t.Errorf("%s: the rootfs's file %s is %s on the node, want %s", name, path, owner, want)
			}
		}
	}
	if !inVol || !inUpper {
		t.Errorf("%s: the files the pod wrote, as the node sees them (volume found %t, upper dir found %t):\n%s", name, inVol, inUpper, owners)
	}
	return host
}
