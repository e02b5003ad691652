//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/remotecommand"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// kubeletNode is one daemon on a bridge network, one kubelet on it, and the
// busybox image in a registry the pods pull from.
type kubeletNode struct {
	d   *Daemon
	k   *Kubelet
	ref string

	gone podTraces // of the pod RemovedManifestStopsPod removed, for RemovedPodsLeaveNothing
}

func newKubeletNode(t *testing.T) *kubeletNode {
	t.Helper()
	kubeletBinary(t)
	removeHostPortChainsAtEnd(t)
	d := StartDaemon(t, withUserNamespaces())
	d.bridgeNetwork(t)
	reg := registry.Start(t, registry.Options{})
	ref := reg.Host() + "/e2e/busybox:latest"
	testimage.Push(t, testimage.Busybox(t), ref)
	return &kubeletNode{d: d, k: startKubelet(t, d), ref: ref}
}

// sleepForever is a container's command that runs until the kubelet stops
// it, and ends at once on SIGTERM (a shell as PID 1 ignores it otherwise).
const sleepForever = "trap 'exit 0' TERM; sleep 3600 & wait"

// container is a busybox container running script with sh -c.
func (n *kubeletNode) container(name, script string) corev1.Container {
	return corev1.Container{
		Name:            name,
		Image:           n.ref,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"sh", "-c", script},
	}
}

// staticPod is a pod with the given containers, quick to stop.
func staticPod(name string, containers ...corev1.Container) *corev1.Pod {
	grace := int64(2)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "e2e"},
		Spec: corev1.PodSpec{
			Containers:                    containers,
			TerminationGracePeriodSeconds: &grace,
			DNSPolicy:                     corev1.DNSDefault,
		},
	}
}

// execProbe is an exec probe run every second.
func execProbe(failureThreshold int32, cmd ...string) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: cmd}},
		PeriodSeconds:    1,
		TimeoutSeconds:   5,
		FailureThreshold: failureThreshold,
	}
}

// execSync runs cmd in a container through the daemon and returns its
// stdout, failing the test on an error or a non-zero exit.
func (n *kubeletNode) execSync(t *testing.T, id string, cmd ...string) string {
	t.Helper()
	stdout, stderr, err := n.d.Runtime.ExecSync(context.Background(), id, cmd, 10*time.Second)
	if err != nil {
		t.Fatalf("ExecSync %v: %v (stderr %q)", cmd, err, stderr)
	}
	return string(stdout)
}

// A node's day under a real kubelet: pods with init containers and shared
// volumes, probes, resources, host ports, logs, exec/attach/port-forward
// through the kubelet, a restart of minicri, and pods removed. One kubelet
// and one pod set serve every subtest, started together to save time.
func TestKubelet(t *testing.T) {
	n := newKubeletNode(t)
	k := n.k
	hostPort := hostPortBelowEphemeral(t)

	// Removed early, checked at the end: the kubelet removes sandboxes only
	// in its container GC, which runs once a minute.
	// Two containers sharing the pod's PID namespace: minicri gives the pod
	// an infra process, which must go with it too.
	// d ignores SIGTERM: the kubelet's StopContainer must kill it when the
	// grace period ends.
	gone := staticPod("gone", n.container("c", sleepForever), n.container("d", "trap '' TERM; sleep 3600 & wait"))
	shared := true
	gone.Spec.ShareProcessNamespace = &shared
	k.writeManifest(t, gone)

	app := n.container("app", "cat /work/msg; "+sleepForever)
	app.Env = []corev1.EnvVar{{Name: "GREETING", Value: "hello from the manifest"}}
	app.WorkingDir = "/work"
	app.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
		Command: []string{"sh", "-c", "echo post-start > /work/hook"}}}}
	initPod := staticPod("init", app,
		n.container("peer", "echo from-peer > /work/peer; "+sleepForever))
	initPod.Spec.InitContainers = []corev1.Container{
		n.container("init1", "echo one > /work/msg; echo init1-done > /dev/termination-log"),
		n.container("init2", "echo two >> /work/msg"),
	}
	initPod.Spec.Volumes = []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	for _, list := range [][]corev1.Container{initPod.Spec.InitContainers, initPod.Spec.Containers} {
		for i := range list {
			list[i].VolumeMounts = []corev1.VolumeMount{{Name: "work", MountPath: "/work"}}
		}
	}
	k.writeManifest(t, initPod)

	// The first run never becomes healthy and is killed by its liveness
	// probe; the run after it (told apart by a file in an emptyDir, which
	// outlives the container) is healthy.
	live := n.container("live", "if [ -e /data/ran ]; then echo second-run; touch /tmp/healthy; else touch /data/ran; echo first-run; fi; "+sleepForever)
	live.LivenessProbe = execProbe(1, "cat", "/tmp/healthy")
	live.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	liveness := staticPod("liveness", live)
	liveness.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	k.writeManifest(t, liveness)

	web := n.container("web", "touch /tmp/ready; "+sleepForever)
	web.ReadinessProbe = execProbe(1, "cat", "/tmp/ready")
	slow := n.container("slow", sleepForever)
	slow.StartupProbe = execProbe(120, "cat", "/tmp/started")
	slow.ReadinessProbe = execProbe(1, "true")
	k.writeManifest(t, staticPod("ready", web, slow))

	limited := n.container("limited", sleepForever)
	limited.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
	k.writeManifest(t, staticPod("resources", limited))

	// nc -ll forks a server per connection: always listening, no gap for a
	// client to be refused in (kubectl's port-forward ends at the first refusal).
	server := n.container("server", "trap 'exit 0' TERM; nc -ll -p 8080 -e echo port-ok & wait")
	server.Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: int32(hostPort), Protocol: corev1.ProtocolTCP}}
	k.writeManifest(t, staticPod("hostport", server))

	// A background list reads /dev/null unless its stdin is redirected
	// explicitly: the attach's stdin goes through fd 3.
	// The restricted Pod Security Standard, as most workloads run today.
	locked := n.container("locked", sleepForever)
	uid, gid, no := int64(1000), int64(1000), false
	yes := true
	locked.SecurityContext = &corev1.SecurityContext{
		RunAsUser:                &uid,
		RunAsGroup:               &gid,
		RunAsNonRoot:             &yes,
		ReadOnlyRootFilesystem:   &yes,
		AllowPrivilegeEscalation: &no,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	k.writeManifest(t, staticPod("restricted", locked))

	// Run-to-completion pods, as a Job's: the phase follows the exit code.
	for name, code := range map[string]int{"job-ok": 0, "job-fail": 3} {
		job := staticPod(name, n.container("work", fmt.Sprintf("echo working; exit %d", code)))
		job.Spec.RestartPolicy = corev1.RestartPolicyNever
		k.writeManifest(t, job)
	}

	// A readiness probe that always outlives its one-second timeout.
	stuck := n.container("stuck", sleepForever)
	stuck.ReadinessProbe = execProbe(1, "sleep", "31")
	stuck.ReadinessProbe.TimeoutSeconds = 1
	k.writeManifest(t, staticPod("probe-timeout", stuck))

	// A container that outgrows its memory limit: tail keeps a "line" of
	// /dev/zero, which never ends, in memory.
	hog := n.container("hog", "head -c 300000000 /dev/zero | tail -n 1 >/dev/null")
	hog.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi"), corev1.ResourceCPU: resource.MustParse("1")}
	oom := staticPod("oom", hog)
	oom.Spec.RestartPolicy = corev1.RestartPolicyNever
	k.writeManifest(t, oom)

	// About 20 KB/s of numbered lines: the kubelet rotates the log at 64 KiB.
	k.writeManifest(t, staticPod("chatty", n.container("chatty",
		"trap 'exit 0' TERM; pad=$(printf '%01000d' 0); i=0; while true; do i=$((i+1)); echo \"line $i $pad\"; usleep 50000; done & wait")))

	echo := n.container("echo", "trap 'exit 0' TERM; exec 3<&0; while read line; do echo \"got $line\"; done <&3 & wait")
	echo.Stdin = true
	k.writeManifest(t, staticPod("stream", n.container("shell", sleepForever), echo))

	features := writeFeaturePods(t, n) // kubelet_features_test.go
	writeUsernsPod(t, n)

	for _, name := range []string{"gone", "init", "resources", "hostport", "stream", "chatty", "restricted"} {
		k.waitPod(t, name, "Running with every container running", 90*time.Second, running)
	}

	t.Run("RemovedManifestStopsPod", func(t *testing.T) { testRemovedManifestStopsPod(t, n, "gone") })
	t.Run("InitContainersShareEmptyDir", func(t *testing.T) { testInitContainersShareEmptyDir(t, n) })
	t.Run("RestrictedSecurityContextApplies", func(t *testing.T) { testRestricted(t, n) })
	t.Run("CompletedPodsReachTheirPhase", func(t *testing.T) { testCompletedPods(t, n) })
	t.Run("OOMKillIsReported", func(t *testing.T) { testOOMKill(t, n) })
	t.Run("LivenessProbeRestartsContainer", func(t *testing.T) { testLivenessProbeRestartsContainer(t, n) })
	t.Run("StartupAndReadinessProbesFlipReady", func(t *testing.T) { testStartupAndReadinessProbes(t, n) })
	t.Run("ProbeTimeoutKillsProbe", func(t *testing.T) { testProbeTimeout(t, n) })
	t.Run("ResourcesReachCgroups", func(t *testing.T) { testResourcesReachCgroups(t, n) })
	t.Run("HostPortReachesContainer", func(t *testing.T) { testHostPort(t, n, hostPort) })
	t.Run("ContainerLogsIncludingPrevious", func(t *testing.T) { testContainerLogs(t, n) })
	t.Run("LogRotationLosesNoLine", func(t *testing.T) { testLogRotation(t, n) })
	t.Run("StatsSummaryCoversPods", func(t *testing.T) { testStatsSummary(t, n) })
	t.Run("ExecThroughKubelet", func(t *testing.T) { testExecThroughKubelet(t, n) })
	t.Run("AttachThroughKubelet", func(t *testing.T) { testAttachThroughKubelet(t, n) })
	t.Run("PortForwardThroughKubelet", func(t *testing.T) { testPortForwardThroughKubelet(t, n) })
	t.Run("NodeFeaturesFromInside", func(t *testing.T) { testNodeFeatures(t, n, features) })
	t.Run("UserNamespacePod", func(t *testing.T) { testUserNamespacePod(t, n) })
	t.Run("DaemonRestartKeepsPodsRunning", func(t *testing.T) { testDaemonRestart(t, n) })
	t.Run("RemovedPodsLeaveNothing", func(t *testing.T) { testRemovedPodsLeaveNothing(t, n) })
}

func testInitContainersShareEmptyDir(t *testing.T, n *kubeletNode) {
	k := n.k
	p := k.waitPod(t, "init", "Running", 30*time.Second, running)
	for _, name := range []string{"init1", "init2"} {
		st := containerStatus(p, name)
		if st == nil || st.State.Terminated == nil || st.State.Terminated.ExitCode != 0 {
			t.Errorf("init container %s: %+v, want terminated with exit code 0", name, st)
		}
	}
	if msg := containerStatus(p, "init1").State.Terminated.Message; msg != "init1-done\n" {
		t.Errorf("init1's termination message %q, want what it wrote to /dev/termination-log", msg)
	}
	if code, body := k.get(t, "/containerLogs/e2e/"+k.podName("init")+"/app"); code != http.StatusOK || body != "one\ntwo\n" {
		t.Errorf("the app read %q (HTTP %d) from the emptyDir, want both init containers' lines in order", body, code)
	}
	app := k.runningContainer(t, "init", "app")
	waitFor(t, "the peer container's file in the shared emptyDir", 10*time.Second, func() bool {
		out, _, err := n.d.Runtime.ExecSync(context.Background(), app, []string{"cat", "/work/peer"}, 10*time.Second)
		return err == nil && string(out) == "from-peer\n"
	})
	// The manifest's env and working dir reach execs too; the postStart
	// hook ran (by ExecSync) in the container.
	if got := n.execSync(t, app, "sh", "-c", `echo "$GREETING in $(pwd)"; cat hook`); got != "hello from the manifest in /work\npost-start\n" {
		t.Errorf("env, working dir and postStart hook: %q", got)
	}
	// The kubelet's /etc/hosts and the pod's hostname.
	if got := strings.TrimSpace(n.execSync(t, app, "hostname")); got != k.podName("init") {
		t.Errorf("hostname %q, want the pod's name %q", got, k.podName("init"))
	}
	if hosts := n.execSync(t, app, "cat", "/etc/hosts"); !strings.Contains(hosts, "# Kubernetes-managed hosts file") ||
		!strings.Contains(hosts, p.Status.PodIP+"\t"+k.podName("init")) {
		t.Errorf("/etc/hosts is not the kubelet's, with the pod IP %s and name:\n%s", p.Status.PodIP, hosts)
	}
}

func testLivenessProbeRestartsContainer(t *testing.T, n *kubeletNode) {
	p := n.k.waitPod(t, "liveness", "the liveness container restarted once and running healthy", 60*time.Second, liveRestartedHealthy)
	st := containerStatus(p, "live")
	if st.RestartCount != 1 {
		t.Errorf("restart count %d, want 1: the second run is healthy", st.RestartCount)
	}
	if st.LastTerminationState.Terminated == nil {
		t.Errorf("no last termination state after a liveness kill: %+v", st)
	}
	if !podReady(p) {
		t.Errorf("pod not Ready after the healthy restart: %+v", p.Status.Conditions)
	}
}

// liveRestartedHealthy: pod liveness's first run was killed by its probe
// and the second runs healthy, after which nothing restarts it.
func liveRestartedHealthy(p *corev1.Pod) bool {
	st := containerStatus(p, "live")
	return st != nil && st.RestartCount >= 1 && st.State.Running != nil && st.Ready
}

func testStartupAndReadinessProbes(t *testing.T, n *kubeletNode) {
	k := n.k
	// web is ready (its file exists); slow runs but its startup probe fails,
	// so its readiness probe, which would pass, is not run yet.
	p := k.waitPod(t, "ready", "web ready and slow running", 60*time.Second, func(p *corev1.Pod) bool {
		web, slow := containerStatus(p, "web"), containerStatus(p, "slow")
		return web != nil && web.Ready && slow != nil && slow.State.Running != nil
	})
	if slow := containerStatus(p, "slow"); (slow.Started != nil && *slow.Started) || slow.Ready || podReady(p) {
		t.Fatalf("before its startup probe passed: slow started %v ready %v, pod ready %v; want none", slow.Started, slow.Ready, podReady(p))
	}
	n.execSync(t, k.runningContainer(t, "ready", "slow"), "touch", "/tmp/started")
	k.waitPod(t, "ready", "slow started and the pod Ready", 30*time.Second, func(p *corev1.Pod) bool {
		slow := containerStatus(p, "slow")
		return slow.Started != nil && *slow.Started && slow.Ready && podReady(p)
	})

	web := k.runningContainer(t, "ready", "web")
	n.execSync(t, web, "rm", "/tmp/ready")
	k.waitPod(t, "ready", "not Ready after web's readiness probe failed", 30*time.Second, func(p *corev1.Pod) bool {
		return !podReady(p) && !containerStatus(p, "web").Ready
	})
	n.execSync(t, web, "touch", "/tmp/ready")
	p = k.waitPod(t, "ready", "Ready again after web's readiness probe passed", 30*time.Second, podReady)
	if rc := restartCounts(p); rc["web"] != 0 || rc["slow"] != 0 {
		t.Errorf("restart counts %v: a readiness or startup probe must not restart anything", rc)
	}
}

func testResourcesReachCgroups(t *testing.T, n *kubeletNode) {
	k := n.k
	p := k.waitPod(t, "resources", "Running", 30*time.Second, running)
	if p.Status.QOSClass != corev1.PodQOSBurstable {
		t.Errorf("QoS class %q, want Burstable", p.Status.QOSClass)
	}
	id := k.runningContainer(t, "resources", "limited")
	// The values the kubelet derives from the pod's requests and limits, as
	// the container sees its own cgroups.
	for _, c := range []struct{ file, want string }{
		{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "67108864"}, // 64Mi
		{"/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "50000"},            // 500m of
		{"/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000"},          // the default period
		{"/sys/fs/cgroup/cpu/cpu.shares", "102"},                    // 100m requested
	} {
		if got := strings.TrimSpace(n.execSync(t, id, "cat", c.file)); got != c.want {
			t.Errorf("%s = %s inside the container, want %s", c.file, got, c.want)
		}
	}
	// And from the host: the container's cgroup lies under the kubelet's
	// pod cgroup, below its cgroup root.
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", n.d.containerPID(t, id)))
	if err != nil {
		t.Fatal(err)
	}
	want := k.CgroupRoot + "/kubepods/burstable/pod" + string(p.UID)
	for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && f[1] == "memory" && !strings.HasPrefix(f[2], want+"/") {
			t.Errorf("container's memory cgroup %s, want below %s", f[2], want)
		}
	}
}

func testHostPort(t *testing.T, n *kubeletNode, hostPort int) {
	n.k.waitPod(t, "hostport", "Running", 30*time.Second, running)
	addr := fmt.Sprintf("127.0.0.1:%d", hostPort)
	var got string
	waitFor(t, "the container's answer on "+addr, 20*time.Second, func() bool {
		got = readLine(addr)
		return got == "port-ok"
	})
}

// readLine connects to addr and reads one line; "" on any failure.
func readLine(addr string) string {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return ""
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	line, _ := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line)
}

func testContainerLogs(t *testing.T, n *kubeletNode) {
	k := n.k
	k.waitPod(t, "liveness", "the restarted container running", 60*time.Second, func(p *corev1.Pod) bool {
		st := containerStatus(p, "live")
		return st != nil && st.RestartCount >= 1 && st.State.Running != nil
	})
	path := "/containerLogs/e2e/" + k.podName("liveness") + "/live"
	if code, body := k.get(t, path); code != http.StatusOK || body != "second-run\n" {
		t.Errorf("GET %s: %d %q, want the current run's log", path, code, body)
	}
	if code, body := k.get(t, path+"?previous=true"); code != http.StatusOK || body != "first-run\n" {
		t.Errorf("GET %s?previous=true: %d %q, want the killed run's log", path, code, body)
	}
	if code, body := k.get(t, path+"?timestamps=true"); code != http.StatusOK || !strings.HasSuffix(body, " second-run\n") {
		t.Errorf("GET %s?timestamps=true: %d %q, want a timestamp before the line", path, code, body)
	}
}

func testDaemonRestart(t *testing.T, n *kubeletNode) {
	k := n.k
	names := []string{"init", "liveness", "ready", "resources", "hostport", "stream", "chatty", "restricted"}
	before := map[string]map[string]int32{}
	ids := map[string]bool{}
	// What the earlier subtests wait for, waited for here too, so that this
	// one runs alone: pod ready Ready (its slow container's startup probe
	// waits for a file that StartupAndReadinessProbesFlipReady makes), and
	// pod liveness past the one restart its probe makes, which would
	// otherwise land in the hold below.
	n.execSync(t, k.runningContainer(t, "ready", "slow"), "touch", "/tmp/started")
	k.waitPod(t, "ready", "Ready before the restart", 30*time.Second, podReady)
	k.waitPod(t, "liveness", "restarted once by its probe and healthy, before the restart", 60*time.Second, liveRestartedHealthy)
	for _, name := range names {
		p := k.waitPod(t, name, "Running", 60*time.Second, running)
		before[name] = restartCounts(p)
		for _, c := range k.criContainers(t, name) {
			if c.GetState() == runtime.ContainerState_CONTAINER_RUNNING {
				ids[c.GetId()] = true
			}
		}
	}
	// A pod arrives while the daemon is down: the kubelet's calls fail
	// until it is back, and the pod is then made once.
	n.d.kill9(t)
	k.writeManifest(t, staticPod("late", n.container("c", sleepForever)))
	waitFor(t, "the kubelet to see pod late", 10*time.Second, func() bool { return k.pod(t, "late") != nil })
	n.d.Start()
	k.waitPod(t, "late", "Running, made after the daemon came back", 60*time.Second, running)
	if pods, err := n.d.Runtime.ListPodSandbox(context.Background(), nil); err == nil {
		var sandboxes []string
		for _, p := range pods {
			if p.GetMetadata().GetName() == k.podName("late") {
				sandboxes = append(sandboxes, p.GetId()[:12]+" "+p.GetState().String())
			}
		}
		if len(sandboxes) != 1 {
			t.Errorf("pod late has sandboxes %v, want one", sandboxes)
		}
	}
	// The kubelet's probes go through the new daemon: a readiness flip
	// proves that it talks to it again.
	web := k.runningContainer(t, "ready", "web")
	n.execSync(t, web, "rm", "/tmp/ready")
	k.waitPod(t, "ready", "not Ready after the restart, its readiness file removed", 30*time.Second, func(p *corev1.Pod) bool { return !podReady(p) })
	n.execSync(t, web, "touch", "/tmp/ready")
	k.waitPod(t, "ready", "Ready again after the restart", 30*time.Second, podReady)
	// Several of the kubelet's sync loops (2 s) later, nothing was restarted.
	hold := time.Now().Add(6 * time.Second)
	for time.Now().Before(hold) {
		for _, name := range names {
			p := k.pod(t, name)
			if p == nil || !running(p) {
				t.Fatalf("pod %s not running after the daemon restart: %+v", name, p)
			}
			if rc := restartCounts(p); fmt.Sprint(rc) != fmt.Sprint(before[name]) {
				t.Fatalf("pod %s restart counts %v after the daemon restart, were %v", name, rc, before[name])
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	for id := range ids {
		if st := n.d.status(t, id); st.GetState() != runtime.ContainerState_CONTAINER_RUNNING {
			t.Errorf("container %s %s is %v after the daemon restart", id[:12], st.GetMetadata().GetName(), st.GetState())
		}
	}
	// Exec and attach through the kubelet reach the containers again, by
	// the new daemon's streaming server.
	var out lockedBuffer
	if err := k.stream(t, "spdy", k.streamURL("exec", "stream", "shell", []string{"echo", "after-restart"}, false, false),
		remotecommand.StreamOptions{Stdout: &out, Stderr: &out}); err != nil || out.String() != "after-restart\n" {
		t.Errorf("exec through the kubelet after the daemon restart: err %v, output %q", err, out.String())
	}
	attachEcho(t, k, "websocket", "after-restart")
}

// podTraces is what a running pod has on the host, to check it all goes.
type podTraces struct {
	sandbox    string
	ip         string
	pids       []int
	cgroup     string // the pod's cgroup below the kubelet's root
	containers []string
}

func (n *kubeletNode) traces(t *testing.T, name string) podTraces {
	t.Helper()
	p := n.k.pod(t, name)
	sb := n.k.criSandbox(t, name)
	if p == nil || sb == nil {
		t.Fatalf("pod %s: kubelet %v, sandbox %v", name, p != nil, sb != nil)
	}
	tr := podTraces{sandbox: sb.GetId(), ip: p.Status.PodIP, cgroup: n.k.CgroupRoot + "/kubepods/besteffort/pod" + string(p.UID)}
	if p.Spec.ShareProcessNamespace != nil && *p.Spec.ShareProcessNamespace {
		infra := n.d.infraProcess(t, tr.sandbox)
		if infra == 0 {
			t.Fatalf("pod %s shares its PID namespace but has no infra process", name)
		}
		tr.pids = append(tr.pids, infra)
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	for _, c := range n.k.criContainers(t, name) {
		tr.containers = append(tr.containers, c.GetId())
		if c.GetState() == runtime.ContainerState_CONTAINER_RUNNING {
			tr.pids = append(tr.pids, n.d.containerPID(t, c.GetId()))
			if !strings.Contains(string(mounts), c.GetId()) {
				t.Fatalf("no mount of running container %s: the check that none is left would prove nothing", c.GetId())
			}
		}
	}
	// What must go must be there first, or its absence proves nothing.
	if !strings.Contains(string(mounts), tr.sandbox) {
		t.Fatalf("no namespace pin of sandbox %s in the mount table", tr.sandbox)
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", tr.cgroup)); err != nil {
		t.Fatalf("the pod's cgroup: %v", err)
	}
	if tr.ip == "" || len(tr.pids) < 2 {
		t.Fatalf("pod %s: IP %q, %d processes; want an IP, containers and an infra process", name, tr.ip, len(tr.pids))
	}
	return tr
}

func testRemovedManifestStopsPod(t *testing.T, n *kubeletNode, name string) {
	n.gone = n.traces(t, name)
	n.k.removeManifest(t, name)
	waitFor(t, "the kubelet to forget pod "+name, 30*time.Second, func() bool { return n.k.pod(t, name) == nil })
	waitFor(t, "the sandbox of "+name+" to stop", 30*time.Second, func() bool {
		sb := n.k.criSandbox(t, name)
		return sb == nil || sb.GetState() == runtime.PodSandboxState_SANDBOX_NOTREADY
	})
	for _, pid := range n.gone.pids {
		waitFor(t, fmt.Sprintf("process %d of the pod (container or infra) to end", pid), 10*time.Second, func() bool { return !processRunning(pid) })
	}
}

// The kubelet removes a deleted pod's containers and sandbox in its
// container GC (once a minute); after that nothing of it is left.
func testRemovedPodsLeaveNothing(t *testing.T, n *kubeletNode) {
	tr := n.gone
	if tr.sandbox == "" {
		t.Skip("RemovedManifestStopsPod did not run")
	}
	const what = "the kubelet's container GC to remove the sandbox and containers of the removed pod"
	for deadline := time.Now().Add(90 * time.Second); n.k.criSandbox(t, "gone") != nil || len(n.k.criContainers(t, "gone")) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 90s waiting for %s", what)
		}
		time.Sleep(250 * time.Millisecond) // it runs once a minute: no need to ask the daemon 50 times a second
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	for _, id := range append([]string{tr.sandbox}, tr.containers...) {
		if strings.Contains(string(mounts), id) {
			t.Errorf("a mount of %s is left:\n%s", id, mounts)
		}
		if _, err := os.Stat(filepath.Join(n.d.RunDir, "containers", id)); err == nil {
			t.Errorf("run dir of container %s is left", id)
		}
	}
	if left := hostProcesses(tr.sandbox); len(left) > 0 {
		t.Errorf("processes of sandbox %s left: %v", tr.sandbox, left)
	}
	for _, h := range cgroupV1Hierarchies() {
		if _, err := os.Stat(filepath.Join(h, tr.cgroup)); err == nil {
			t.Errorf("the pod's cgroup %s is left", filepath.Join(h, tr.cgroup))
		}
	}
	for _, ip := range reservedIPs(filepath.Join(n.d.Dir, "ipam")) {
		if ip == tr.ip {
			t.Errorf("the pod's IP %s is still reserved", ip)
		}
	}
}

// statsSummary is the part of the kubelet's /stats/summary the test reads
// (k8s.io/kubelet/pkg/apis/stats/v1alpha1, not a dependency of minicri).
type statsSummary struct {
	Pods []struct {
		PodRef struct {
			Name, Namespace string
		}
		CPU *struct {
			UsageCoreNanoSeconds *uint64
		}
		Memory *struct {
			WorkingSetBytes *uint64
		}
		Network *struct {
			Name       string
			RxBytes    *uint64
			Interfaces []struct{ Name string }
		}
		Containers []struct {
			Name string
			CPU  *struct {
				UsageCoreNanoSeconds *uint64
			}
			Memory *struct {
				WorkingSetBytes *uint64
			}
		}
	}
}

// The kubelet's /stats/summary, which metrics-server and the eviction
// manager read, has CPU and memory figures for every running container and
// CPU, memory and network figures for every pod. The kubelet runs with
// PodAndContainerStatsFromCRI, so all of them come from the runtime's stats
// calls (ListPodSandboxStats, ListContainerStats), not from cAdvisor.
func testStatsSummary(t *testing.T, n *kubeletNode) {
	k := n.k
	pods := []string{"init", "resources", "hostport", "stream"}
	var missing []string
	complete := func() bool {
		code, body := k.get(t, "/stats/summary")
		var sum statsSummary
		if code != http.StatusOK || json.Unmarshal([]byte(body), &sum) != nil {
			missing = []string{fmt.Sprintf("HTTP %d: %.300s", code, body)}
			return false
		}
		seen := map[string]bool{}
		for _, p := range sum.Pods {
			for _, c := range p.Containers {
				if positive(c.CPU != nil, func() *uint64 { return c.CPU.UsageCoreNanoSeconds }) &&
					positive(c.Memory != nil, func() *uint64 { return c.Memory.WorkingSetBytes }) {
					seen[p.PodRef.Name+"/"+c.Name] = true
				}
			}
			if positive(p.CPU != nil, func() *uint64 { return p.CPU.UsageCoreNanoSeconds }) &&
				positive(p.Memory != nil, func() *uint64 { return p.Memory.WorkingSetBytes }) {
				seen[p.PodRef.Name+" cpu and memory"] = true
			}
			if p.Network != nil && p.Network.RxBytes != nil && len(p.Network.Interfaces) > 0 {
				seen[p.PodRef.Name+" network"] = true
			}
			// The hostPort subtest sent traffic to this pod's interface.
			if p.PodRef.Name == k.podName("hostport") && positive(p.Network != nil, func() *uint64 { return p.Network.RxBytes }) {
				seen[p.PodRef.Name+" received bytes"] = true
			}
		}
		missing = nil
		want := []string{k.podName("hostport") + " received bytes"}
		for _, pod := range pods {
			want = append(want, k.podName(pod)+" cpu and memory", k.podName(pod)+" network")
			for _, c := range k.pod(t, pod).Spec.Containers {
				want = append(want, k.podName(pod)+"/"+c.Name)
			}
		}
		for _, w := range want {
			if !seen[w] {
				missing = append(missing, w)
			}
		}
		return len(missing) == 0
	}
	for deadline := time.Now().Add(30 * time.Second); !complete(); time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, /stats/summary lacks figures for %v", missing)
		}
	}
}

// positive is true when present holds and the value get returns is set and
// above zero.
func positive(present bool, get func() *uint64) bool {
	if !present {
		return false
	}
	v := get()
	return v != nil && *v > 0
}

// The kubelet rotates a log past containerLogMaxSize by renaming it and
// calling ReopenContainerLog: the container's lines go on in a new file,
// the first of which follows the last of the renamed one.
func testLogRotation(t *testing.T, n *kubeletNode) {
	k := n.k
	p := k.waitPod(t, "chatty", "Running", 30*time.Second, running)
	dir := filepath.Join(k.Dir, "pod-logs", fmt.Sprintf("e2e_%s_%s", p.Name, p.UID), "chatty")
	var state string
	check := func() bool {
		rotated, _ := filepath.Glob(filepath.Join(dir, "0.log.*"))
		var plain []string
		for _, r := range rotated {
			if !strings.HasSuffix(r, ".gz") && !strings.HasSuffix(r, ".tmp") {
				plain = append(plain, r)
			}
		}
		if len(plain) != 1 {
			state = fmt.Sprintf("rotated files %v", rotated)
			return false
		}
		before, errB := os.ReadFile(plain[0])
		current, errC := os.ReadFile(filepath.Join(dir, "0.log"))
		if again, _ := filepath.Glob(filepath.Join(dir, "0.log.*")); fmt.Sprint(again) != fmt.Sprint(rotated) {
			state = "rotated again while read"
			return false
		}
		if errB != nil || errC != nil {
			state = fmt.Sprintf("read: %v, %v", errB, errC)
			return false
		}
		last, first := lineNumbers(before), lineNumbers(current)
		if len(last) == 0 || len(first) == 0 {
			state = fmt.Sprintf("%d lines in %s, %d in 0.log", len(last), filepath.Base(plain[0]), len(first))
			return false
		}
		if first[0] != last[len(last)-1]+1 {
			t.Fatalf("%s ends with line %d, 0.log starts with line %d: lines lost or repeated in the rotation", filepath.Base(plain[0]), last[len(last)-1], first[0])
		}
		return true
	}
	for deadline := time.Now().Add(45 * time.Second); !check(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no rotated log followed by a reopened one after 45 s: %s", state)
		}
	}
	// And the kubelet serves the new file.
	if code, body := k.get(t, "/containerLogs/e2e/"+p.Name+"/chatty?tailLines=1"); code != http.StatusOK || !strings.HasPrefix(body, "line ") {
		t.Errorf("GET /containerLogs after the rotation: %d %.80q", code, body)
	}
}

// lineNumbers are the N of the "line N ..." messages in a CRI log file.
func lineNumbers(data []byte) []int {
	var out []int
	for _, l := range strings.Split(parseLog(data), "\n") {
		var i int
		if _, err := fmt.Sscanf(l, "line %d", &i); err == nil {
			out = append(out, i)
		}
	}
	return out
}

func testRestricted(t *testing.T, n *kubeletNode) {
	k := n.k
	id := k.runningContainer(t, "restricted", "locked")
	if got := strings.TrimSpace(n.execSync(t, id, "id")); !strings.HasPrefix(got, "uid=1000(app) gid=1000(app)") {
		t.Errorf("id = %q, want uid and gid 1000", got)
	}
	status := n.execSync(t, id, "cat", "/proc/self/status")
	for _, want := range []string{"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(status, want) {
			t.Errorf("/proc/self/status lacks %q", want)
		}
	}
	stdout, _, err := n.d.Runtime.ExecSync(context.Background(), id, []string{"sh", "-c", "touch /rootfs-write 2>&1; echo exit=$?"}, 10*time.Second)
	if err != nil || !strings.Contains(string(stdout), "Read-only file system") {
		t.Errorf("writing the root file system: %q, %v; want it refused as read-only", stdout, err)
	}
}

func testCompletedPods(t *testing.T, n *kubeletNode) {
	k := n.k
	for name, want := range map[string]struct {
		phase corev1.PodPhase
		code  int32
	}{"job-ok": {corev1.PodSucceeded, 0}, "job-fail": {corev1.PodFailed, 3}} {
		p := k.waitPod(t, name, "phase "+string(want.phase), 60*time.Second, func(p *corev1.Pod) bool { return p.Status.Phase == want.phase })
		st := containerStatus(p, "work")
		if st == nil || st.State.Terminated == nil || st.State.Terminated.ExitCode != want.code || st.RestartCount != 0 {
			t.Errorf("%s: container status %+v, want terminated with exit code %d, no restart", name, st, want.code)
		}
		// A finished pod's sandbox is stopped: its network and namespaces go.
		waitFor(t, "the sandbox of "+name+" to stop", 30*time.Second, func() bool {
			sb := k.criSandbox(t, name)
			return sb != nil && sb.GetState() == runtime.PodSandboxState_SANDBOX_NOTREADY
		})
		if code, body := k.get(t, "/containerLogs/e2e/"+p.Name+"/work"); code != http.StatusOK || body != "working\n" {
			t.Errorf("%s: log %d %q", name, code, body)
		}
	}
}

// A container killed by the OOM killer at its memory limit ends with the
// reason OOMKilled, which kubectl describe shows.
func testOOMKill(t *testing.T, n *kubeletNode) {
	p := n.k.waitPod(t, "oom", "phase Failed", 60*time.Second, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if p.Status.QOSClass != corev1.PodQOSGuaranteed {
		t.Errorf("QoS class %q, want Guaranteed", p.Status.QOSClass)
	}
	st := containerStatus(p, "hog")
	if st == nil || st.State.Terminated == nil {
		t.Fatalf("container hog: %+v, want terminated", st)
	}
	if term := st.State.Terminated; term.Reason != "OOMKilled" || term.ExitCode != 137 {
		t.Errorf("terminated with reason %q, exit code %d; want OOMKilled, 137", term.Reason, term.ExitCode)
	}
}

// An exec probe past its timeout fails, and its process is killed: probes
// every second of a command that would run 31 s must not pile up.
func testProbeTimeout(t *testing.T, n *kubeletNode) {
	k := n.k
	p := k.waitPod(t, "probe-timeout", "running for 8 s, long enough for several probes", 60*time.Second, func(p *corev1.Pod) bool {
		st := containerStatus(p, "stuck")
		return st != nil && st.State.Running != nil && time.Since(st.State.Running.StartedAt.Time) > 8*time.Second
	})
	if st := containerStatus(p, "stuck"); st.Ready || st.RestartCount != 0 {
		t.Errorf("ready %v, restarts %d; want not ready (every probe timed out) and no restart", st.Ready, st.RestartCount)
	}
	probeProcesses := func() []string {
		var out []string
		for _, proc := range hostProcesses("sleep\x0031\x00") {
			if strings.HasSuffix(proc, ": sleep 31 ") {
				out = append(out, proc)
			}
		}
		return out
	}
	// Seen at least once, or the count below would prove nothing.
	waitFor(t, "a probe's sleep 31 among the host's processes", 10*time.Second, func() bool { return len(probeProcesses()) > 0 })
	// One may be running now, another being killed.
	if probes := probeProcesses(); len(probes) > 2 {
		t.Errorf("%d probe processes alive, want at most 2: timed-out probes are not killed:\n%s", len(probes), strings.Join(probes, "\n"))
	}
}

// hostPortBelowEphemeral is a free port below the kernel's ephemeral range,
// for a hostPort. A hostPort is a DNAT rule, not a bound socket: one in the
// ephemeral range can be given to a process binding port 0 (the daemon's
// streaming server after a restart did), and the rule then steals that
// process's loopback connections.
func hostPortBelowEphemeral(t *testing.T) int {
	t.Helper()
	low := 32768
	if r, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscan(string(r), &low)
	}
	if low <= 20000 {
		t.Skipf("the ephemeral port range starts at %d: no room for a hostPort below it", low)
	}
	for i := 0; i < 100; i++ {
		var b [2]byte
		_, _ = rand.Read(b[:])
		port := 20000 + (int(b[0])<<8|int(b[1]))%(low-20000)
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			l.Close()
			return port
		}
	}
	t.Fatalf("no free port between 20000 and %d", low)
	return 0
}
