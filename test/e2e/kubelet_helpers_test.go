//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// kubeletEnv names the kubelet binary the kubelet tests run; make e2e sets it.
const kubeletEnv = "MINICRI_KUBELET"

// kubeletLogEnv names a directory to keep each kubelet test's whole logs in
// (the test's dir goes when it ends): TEST-kubelet.log, and TEST-minicri.log
// for the daemon (since its last restart).
const kubeletLogEnv = "MINICRI_KUBELET_LOG_DIR"

// kubeletTunables are the kernel settings a kubelet makes sure of at start
// (setupKernelTunables), with the values it wants. They are not namespaced:
// in the test kubelet's mount namespace, files holding these values cover
// them, so that it finds them set and the host keeps its own.
var kubeletTunables = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// Kubelet is a real kubelet, standalone (no API server: static pods from a
// manifest directory), talking to one Daemon.
type Kubelet struct {
	d           *Daemon
	Dir         string // everything of this kubelet lives below it
	ManifestDir string
	RootDir     string
	NodeName    string
	Port        int    // the kubelet's API: /pods, /exec, /containerLogs …
	CgroupRoot  string // the cgroup all its pods go below

	cmd    *exec.Cmd
	exited chan struct{}
	log    string
	client *http.Client
}

// kubeletBinary is the kubelet to run; it skips the test, saying how to get
// one, when MINICRI_KUBELET is not set.
func kubeletBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv(kubeletEnv)
	if bin == "" {
		t.Skipf("%s is not set: build the kubelet with `make kubelet` (hack/build-kubelet.sh prints its path) "+
			"and run %s=PATH go test -tags e2e -run TestKubelet ./test/e2e/; make e2e sets it", kubeletEnv, kubeletEnv)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s=%s: %v", kubeletEnv, bin, err)
	}
	return bin
}

// startKubelet starts a kubelet on d's socket, waits until it is healthy,
// and at the end of the test kills it by pid, removes every pod it made
// from the daemon, and removes its cgroups. It skips the test when
// MINICRI_KUBELET is not set. extraArgs go on its command line after the others.
func startKubelet(t *testing.T, d *Daemon, extraArgs ...string) *Kubelet {
	t.Helper()
	return startKubeletConfigured(t, d, "", extraArgs...)
}

// startKubeletConfigured is startKubelet with extraConfig (YAML) added to
// the kubelet's KubeletConfiguration.
func startKubeletConfigured(t *testing.T, d *Daemon, extraConfig string, extraArgs ...string) *Kubelet {
	t.Helper()
	bin := kubeletBinary(t)
	k := &Kubelet{
		d:           d,
		Dir:         filepath.Join(d.Dir, "kubelet"),
		NodeName:    "kn" + randomHex(3),
		Port:        freeTCPPort(t),
		CgroupRoot:  cgroupParent + "/kubelet-" + randomHex(4),
		ManifestDir: filepath.Join(d.Dir, "kubelet", "manifests"),
		RootDir:     filepath.Join(d.Dir, "kubelet", "root"),
		exited:      make(chan struct{}),
	}
	k.log = filepath.Join(k.Dir, "kubelet.log")
	for _, dir := range []string{k.ManifestDir, k.RootDir, filepath.Join(k.Dir, "pod-logs"), filepath.Join(k.Dir, "volume-plugins")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	resolvConf := filepath.Join(k.Dir, "resolv.conf")
	if err := os.WriteFile(resolvConf, []byte("nameserver 10.96.0.10\nsearch e2e.local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// With cgroupsPerQOS the kubelet wants its cgroup root to exist in every
	// hierarchy; a root of its own per run keeps concurrent runs apart, and
	// below the suite's cgroup parent the final leak check sees it.
	for _, h := range cgroupV1Hierarchies() {
		if err := os.MkdirAll(filepath.Join(h, k.CgroupRoot), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	config := filepath.Join(k.Dir, "config.yaml")
	if err := os.WriteFile(config, []byte(k.config(d, resolvConf, freeTCPPort(t))+extraConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(k.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	args := []string{bin, "--config", config, "--root-dir", k.RootDir, "--cert-dir", filepath.Join(k.Dir, "pki"),
		"--hostname-override", k.NodeName, "--v=2"}
	args = append(args, extraArgs...)
	// Two paths of a kubelet cannot be moved: the device plugin socket dir
	// /var/lib/kubelet/device-plugins (which it empties at start: a real
	// node's plugins would lose their sockets) and the log symlinks in
	// /var/log/containers; and it sets kernel tunables. The kubelet runs in
	// a mount namespace of its own where a tmpfs hides each path (or its
	// parent, where it does not exist: no mount point is made on the host)
	// and the tunables read as set, all gone with the kubelet. Propagation
	// from the host stays on (slave); the kubelet's own mounts do not reach
	// the host, which the suite's pods (emptyDir on disk, no secrets) never need.
	tunables := filepath.Join(k.Dir, "tunables")
	if err := os.MkdirAll(tunables, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, value := range kubeletTunables {
		if err := os.WriteFile(filepath.Join(tunables, strings.ReplaceAll(name, "/", ".")), []byte(value+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k.cmd = exec.Command("unshare", append([]string{"--mount", "--propagation", "slave", "--", "sh", "-c", kubeletMountNS, "sh"}, args...)...)
	k.cmd.Env = append(os.Environ(), "KUBELET_TUNABLES="+tunables)
	k.cmd.Stdout, k.cmd.Stderr = logFile, logFile
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	existed := map[string]bool{}
	for _, p := range kubeletHostPaths {
		_, err := os.Lstat(p)
		existed[p] = err == nil
	}
	hostTunables := readTunables()
	if err := k.cmd.Start(); err != nil {
		t.Fatalf("start kubelet: %v", err)
	}
	go func() { _ = k.cmd.Wait(); close(k.exited) }()
	t.Cleanup(func() {
		k.stop(t)
		for _, p := range kubeletHostPaths {
			if _, err := os.Lstat(p); err == nil && !existed[p] {
				t.Errorf("the kubelet made %s on the host", p)
			}
		}
		if now := readTunables(); fmt.Sprint(now) != fmt.Sprint(hostTunables) {
			t.Errorf("the host's kernel tunables changed while the kubelet ran: %v, were %v", now, hostTunables)
		}
	})

	k.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		// The kubelet serves a self-signed certificate it made at start.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := k.client.Get(k.url("/healthz"))
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			err = fmt.Errorf("%s: %s", resp.Status, body)
		}
		select {
		case <-k.exited:
			t.Fatalf("kubelet exited at start: %v\n%s", k.cmd.ProcessState, k.logTail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubelet not healthy on port %d after 60 s: %v\n%s", k.Port, err, k.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return k
}

// readTunables reads the host's values of kubeletTunables.
func readTunables() map[string]string {
	out := map[string]string{}
	for name := range kubeletTunables {
		v, _ := os.ReadFile("/proc/sys/" + name)
		out[name] = strings.TrimSpace(string(v))
	}
	return out
}

// kubeletHostPaths are what a kubelet makes on the host whatever its
// configuration; the tests' kubelets must not.
var kubeletHostPaths = []string{"/var/lib/kubelet", "/var/log/containers", "/var/log/pods"}

// kubeletMountNS is the script that sets up the kubelet's mount namespace,
// then runs "$@": a tmpfs on /var/lib/kubelet and /var/log/containers (or on
// their parent when they do not exist), and each file of $KUBELET_TUNABLES
// bound on the /proc/sys file its sysctl name (dots for slashes) names.
const kubeletMountNS = `set -e
hide() { for d in "$@"; do if [ -d "$d" ] && [ ! -L "$d" ]; then mount -t tmpfs -o mode=0755,size=64m tmpfs "$d"; return; fi; done; echo "nowhere to hide $1" >&2; exit 1; }
hide /var/lib/kubelet /var/lib
hide /var/log/containers /var/log
for f in "$KUBELET_TUNABLES"/*; do mount --bind "$f" "/proc/sys/$(basename "$f" | tr . /)"; done
exec "$@"`

// config is the KubeletConfiguration of a standalone test kubelet: everything
// it writes in the test's dir, its own ports on 127.0.0.1, nothing it would
// do to the node on its own (evictions, image GC, node allocatable, iptables)
// and short loops so that tests see changes within a second or two.
func (k *Kubelet) config(d *Daemon, resolvConf string, healthzPort int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: %[1]s
imageServiceEndpoint: %[1]s
cgroupDriver: cgroupfs
failCgroupV1: false
featureGates:
  PodAndContainerStatsFromCRI: true
  EventedPLEG: true
cgroupsPerQOS: true
cgroupRoot: %[2]s
enforceNodeAllocatable: []
staticPodPath: %[3]s
fileCheckFrequency: 1s
syncFrequency: 2s
address: 127.0.0.1
port: %[4]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[5]d
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
registerNode: false
failSwapOn: false
resolvConf: %[6]s
podLogsDir: %[7]s
volumePluginDir: %[8]s
serializeImagePulls: true
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {}
makeIPTablesUtilChains: false
runtimeRequestTimeout: 2m
containerLogMaxSize: 64Ki
containerLogMaxFiles: 2
containerLogMonitorInterval: 3s
`, d.Endpoint, k.CgroupRoot, k.ManifestDir, k.Port, healthzPort, resolvConf,
		filepath.Join(k.Dir, "pod-logs"), filepath.Join(k.Dir, "volume-plugins"))
}

// stop kills the kubelet (it does not stop pods when it exits, like a node
// losing its kubelet), then removes the pods it left in the daemon, what it
// mounted under its root dir, and its cgroups.
func (k *Kubelet) stop(t *testing.T) {
	select {
	case <-k.exited:
	default:
		_ = k.cmd.Process.Signal(syscall.SIGKILL) // by pid: only the process we started
		<-k.exited
	}
	if t.Failed() {
		t.Logf("--- kubelet log (tail) ---\n%s", k.logTail())
	}
	if dir := os.Getenv(kubeletLogEnv); dir != "" {
		name := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
		if data, err := os.ReadFile(k.log); err == nil {
			_ = os.WriteFile(name+"-kubelet.log", data, 0o644)
		}
		_ = os.WriteFile(name+"-minicri.log", []byte(k.d.Output()), 0o644)
	}
	k.removeAllPods(t)
	for _, m := range mountsBelow(k.RootDir) {
		unmountQuietly(m)
	}
	for _, h := range cgroupV1Hierarchies() {
		if err := removeCgroupTree(filepath.Join(h, k.CgroupRoot)); err != nil {
			t.Errorf("the kubelet's cgroups: %v", err)
		}
	}
}

// removeAllPods stops and removes every sandbox in the daemon, as a drained
// node would.
func (k *Kubelet) removeAllPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods, err := k.d.Runtime.ListPodSandbox(ctx, nil)
	if err != nil {
		t.Errorf("cleanup: ListPodSandbox: %v", err)
		return
	}
	for _, p := range pods {
		if err := k.d.Runtime.StopPodSandbox(ctx, p.GetId()); err != nil {
			t.Errorf("cleanup: StopPodSandbox %s: %v", p.GetMetadata().GetName(), err)
		}
		if err := k.d.Runtime.RemovePodSandbox(ctx, p.GetId()); err != nil {
			t.Errorf("cleanup: RemovePodSandbox %s: %v", p.GetMetadata().GetName(), err)
		}
	}
}

// logTail is the last 150 lines of the kubelet's log.
func (k *Kubelet) logTail() string {
	data, _ := os.ReadFile(k.log)
	return tail(string(data), 150)
}

func (k *Kubelet) url(path string) string {
	return fmt.Sprintf("https://127.0.0.1:%d%s", k.Port, path)
}

// get GETs a path of the kubelet's API and returns the status code and body.
func (k *Kubelet) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := k.client.Get(k.url(path))
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// pods lists the kubelet's pods with their status, from its /pods.
func (k *Kubelet) pods(t *testing.T) []corev1.Pod {
	t.Helper()
	code, body := k.get(t, "/pods")
	if code != http.StatusOK {
		t.Fatalf("GET /pods: %d %s", code, body)
	}
	var list corev1.PodList
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatalf("GET /pods: %v", err)
	}
	return list.Items
}

// pod is the kubelet's view of one of its pods, by manifest name; nil when
// it has no such pod.
func (k *Kubelet) pod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	for _, p := range k.pods(t) {
		if p.Name == k.podName(name) {
			return &p
		}
	}
	return nil
}

// podName is the name the kubelet gives a static pod: NAME-NODENAME.
func (k *Kubelet) podName(name string) string { return name + "-" + k.NodeName }

// waitPod polls the kubelet's view of a pod until cond holds, and returns
// the pod; it fails the test with the pod's last status when time is up.
func (k *Kubelet) waitPod(t *testing.T, name, what string, timeout time.Duration, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p := k.pod(t, name)
		if p != nil && cond(p) {
			return p
		}
		if time.Now().After(deadline) {
			var st []byte
			if p != nil {
				st, _ = json.MarshalIndent(p.Status, "", "  ")
			}
			t.Fatalf("timed out after %s waiting for pod %s: %s; last status:\n%s", timeout, name, what, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writeManifest puts a static pod into the kubelet's manifest dir. The write
// goes to a hidden file first (the kubelet skips those) and is renamed into
// place, so that the kubelet never reads half a manifest.
func (k *Kubelet) writeManifest(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	if pod.Namespace == "" {
		pod.Namespace = "e2e"
	}
	data, err := json.MarshalIndent(pod, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(k.ManifestDir, "."+pod.Name+".json")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(k.ManifestDir, pod.Name+".json")); err != nil {
		t.Fatal(err)
	}
}

// removeManifest deletes a static pod's manifest: the kubelet tears the pod down.
func (k *Kubelet) removeManifest(t *testing.T, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(k.ManifestDir, name+".json")); err != nil {
		t.Fatal(err)
	}
}

// criSandbox is the daemon's sandbox of a kubelet pod (nil when none), the
// newest when there are several.
func (k *Kubelet) criSandbox(t *testing.T, name string) *runtime.PodSandbox {
	t.Helper()
	pods, err := k.d.Runtime.ListPodSandbox(context.Background(), nil)
	if err != nil {
		t.Fatalf("ListPodSandbox: %v", err)
	}
	var found *runtime.PodSandbox
	for _, p := range pods {
		if p.GetMetadata().GetName() == k.podName(name) && (found == nil || p.GetCreatedAt() > found.GetCreatedAt()) {
			found = p
		}
	}
	return found
}

// criContainers lists the daemon's containers of a kubelet pod.
func (k *Kubelet) criContainers(t *testing.T, name string) []*runtime.Container {
	t.Helper()
	all, err := k.d.Runtime.ListContainers(context.Background(), nil)
	if err != nil {
		t.Fatalf("ListContainers: %v", err)
	}
	var out []*runtime.Container
	for _, c := range all {
		if c.GetLabels()["io.kubernetes.pod.name"] == k.podName(name) {
			out = append(out, c)
		}
	}
	return out
}

// runningContainer is the ID of the running container NAME of a kubelet pod.
func (k *Kubelet) runningContainer(t *testing.T, pod, name string) string {
	t.Helper()
	for _, c := range k.criContainers(t, pod) {
		if c.GetMetadata().GetName() == name && c.GetState() == runtime.ContainerState_CONTAINER_RUNNING {
			return c.GetId()
		}
	}
	t.Fatalf("pod %s has no running container %s", pod, name)
	return ""
}

// containerStatus is a container's status in a kubelet pod (init or app).
func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// podReady tells whether the pod's Ready condition is true.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// running tells whether the pod is Running with every app container running.
func running(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil {
			return false
		}
	}
	return true
}

// restartCounts maps each container of the pod to its restart count.
func restartCounts(p *corev1.Pod) map[string]int32 {
	out := map[string]int32{}
	for _, c := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		out[c.Name] = c.RestartCount
	}
	return out
}

// cgroupV1Hierarchies are the mount points of the host's cgroup v1
// hierarchies (one per controller, or named), not the unified one.
func cgroupV1Hierarchies() []string {
	var out []string
	mounts, _ := os.ReadFile("/proc/self/mounts")
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[2] == "cgroup" {
			out = append(out, f[1])
		}
	}
	return out
}

// removeCgroupTree removes a cgroup and those below it, deepest first.
func removeCgroupTree(top string) error {
	var dirs []string
	_ = filepath.WalkDir(top, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// mountsBelow lists the mount points at or below dir, deepest first.
func mountsBelow(dir string) []string {
	var out []string
	mounts, _ := os.ReadFile("/proc/self/mounts")
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && (f[1] == dir || strings.HasPrefix(f[1], dir+"/")) {
			out = append([]string{f[1]}, out...)
		}
	}
	return out
}

// freeTCPPort is a port on 127.0.0.1 free right now, for a server the test
// starts next.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// The CNI portmap plugin, at the first hostPort on a host, adds three chains
// to the nat table and jumps to them, and never removes them (each pod's
// own chain goes with the pod).
var hostPortChains = []struct{ chain, from, match string }{
	{"CNI-HOSTPORT-DNAT", "PREROUTING", "-m addrtype --dst-type LOCAL"},
	{"CNI-HOSTPORT-DNAT", "OUTPUT", "-m addrtype --dst-type LOCAL"},
	{"CNI-HOSTPORT-MASQ", "POSTROUTING", `-m comment --comment "CNI portfwd requiring masquerade"`},
	{"CNI-HOSTPORT-SETMARK", "", ""},
}

// removeHostPortChainsAtEnd removes, when the test ends, the portmap
// plugin's chains if they were not there when it began and no pod's
// mapping is left in them (another run's pods may use them meanwhile).
// Register it before the daemon starts, so that it runs after the pods went.
func removeHostPortChainsAtEnd(t *testing.T) {
	t.Helper()
	iptables := func(args ...string) (string, error) {
		out, err := exec.Command("iptables", append([]string{"-w", "30", "-t", "nat"}, args...)...).CombinedOutput()
		return string(out), err
	}
	if _, err := iptables("-S", "CNI-HOSTPORT-DNAT"); err == nil {
		return // there before us: not ours to remove
	}
	t.Cleanup(func() {
		rules, err := iptables("-S", "CNI-HOSTPORT-DNAT")
		if err != nil || strings.Count(strings.TrimSpace(rules), "\n") > 0 {
			t.Logf("the portmap plugin's chains stay: never made, or still in use: %v %s", err, rules)
			return
		}
		for _, c := range hostPortChains {
			if c.from != "" {
				args := append([]string{"-D", c.from}, splitQuoted(c.match)...)
				_, _ = iptables(append(args, "-j", c.chain)...)
			}
		}
		for _, c := range hostPortChains {
			_, _ = iptables("-F", c.chain)
			_, _ = iptables("-X", c.chain)
		}
		if rules, err := iptables("-S"); err == nil && strings.Contains(rules, "CNI-HOSTPORT") {
			t.Errorf("the portmap plugin's chains are left in the nat table:\n%s", rules)
		}
	})
}

// splitQuoted splits s at spaces, keeping "quoted parts" whole.
func splitQuoted(s string) []string {
	var out []string
	for i, part := range strings.Split(s, `"`) {
		if i%2 == 1 {
			out = append(out, part)
		} else {
			out = append(out, strings.Fields(part)...)
		}
	}
	return out
}
