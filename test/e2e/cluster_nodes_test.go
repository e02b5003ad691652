//go:build cluster

// The checks of a two-node cluster: the host's control plane and the
// production-shaped guest joined with kubeadm join (make cluster NODES=2,
// hack/cluster-node.sh, docs/cluster.md):
//
//	make cluster-test NODES=2
//
// They are skipped unless the cluster's env file names a second node. The
// guest runs under TCG and stays cordoned: the pods these tests put on it
// name it (spec.nodeName), and every wait is generous but bounded.
package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// clusterGuestWait bounds a wait on the guest: a pod's start there (an image
// pulled through the node registry, a sandbox and a container under TCG)
// takes tens of seconds, more with both of the host's cores busy.
const clusterGuestWait = 5 * time.Minute

// twoNodeCluster is the cluster's env, kubectl, and the names of its two
// nodes; the test is skipped when the cluster has one node.
func twoNodeCluster(t *testing.T) (env map[string]string, k clusterKubectl, host, guest string) {
	t.Helper()
	env = clusterEnv(t)
	guest = env["NODE2"]
	if guest == "" {
		t.Skip("the cluster has one node (make cluster NODES=2 for two)")
	}
	k = clusterKubectl{t: t, env: env}
	for _, n := range strings.Fields(k.must("", "get", "nodes", "-o", "jsonpath={.items[*].metadata.name}")) {
		if n != guest {
			host = n
		}
	}
	if host == "" {
		t.Fatalf("no node but the guest %s", guest)
	}
	return env, k, host, guest
}

// clusterEchoPodSpec is the spec of a pod that serves, with busybox's httpd on
// 8080, its own name at / and the address of the client at /cgi-bin/ip (the
// CGI's REMOTE_ADDR), after saying "serving NAME" on stdout.
func clusterEchoPodSpec(image, extra string) string {
	return fmt.Sprintf(`terminationGracePeriodSeconds: 2
%s
containers:
- name: echo
  image: %s
  command: ["/bin/sh", "-c", "mkdir -p /tmp/www/cgi-bin && hostname >/tmp/www/index.html && { echo '#!/bin/sh'; echo 'echo Content-Type: text/plain'; echo echo; echo 'echo $REMOTE_ADDR'; } >/tmp/www/cgi-bin/ip && chmod 0755 /tmp/www/cgi-bin/ip && echo serving $(hostname) && exec busybox httpd -f -p 8080 -h /tmp/www"]
  ports: [{containerPort: 8080}]
  readinessProbe:
    tcpSocket: {port: 8080}
    periodSeconds: 2
`, extra, image)
}

// clusterIndent puts n spaces before every line of s.
func clusterIndent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+pad) + "\n"
}

// clusterHTTPGet asks url of pod (with busybox's nc, as the single-node smoke
// test does) and returns the body's last word.
func clusterHTTPGet(k clusterKubectl, ns, pod, ip string, port int, path string) (string, error) {
	out, err := k.run("", "-n", ns, "exec", pod, "--", "sh", "-c",
		fmt.Sprintf(`printf 'GET %s HTTP/1.0\r\n\r\n' | nc -w 10 %s %d`, path, ip, port))
	if err != nil {
		return "", err
	}
	f := strings.Fields(out)
	if len(f) == 0 {
		return "", fmt.Errorf("no answer from %s:%d%s", ip, port, path)
	}
	return f[len(f)-1], nil
}

// TestClusterTwoNodes checks what a second node gives: both nodes Ready on
// minicri; a pod on each reaching the other by its IP, unmasqueraded; a
// ClusterIP service with an endpoint on each node answering from both, on
// both; kubectl exec, logs and port-forward to the guest's pod through the
// API server; and the node registry closed to pods.
func TestClusterTwoNodes(t *testing.T) {
	env, k, host, guest := twoNodeCluster(t)

	out := k.must("", "get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.status.nodeInfo.containerRuntimeVersion} {.spec.podCIDR}{"\n"}{end}`)
	cidrs := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[1] != "True" || !strings.HasPrefix(f[2], "minicri://") {
			t.Errorf("node %q: want NAME True minicri://... PODCIDR", line)
			continue
		}
		cidrs[f[0]] = f[3]
	}
	if len(cidrs) != 2 || cidrs[host] == cidrs[guest] {
		t.Fatalf("nodes and pod CIDRs %v: want %s and %s Ready on minicri, with pod CIDRs of their own", cidrs, host, guest)
	}

	ns := clusterNamespace(t, k, "minicri-nodes-")
	img := clusterBusybox(t, env, "nodes")
	var manifest strings.Builder
	for name, node := range map[string]string{"on-host": host, "on-guest": guest} {
		fmt.Fprintf(&manifest, "apiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: %s, labels: {app: echo}}\nspec:\n%s---\n",
			name, ns, clusterIndent(clusterEchoPodSpec(img, "nodeName: "+node), 2))
	}
	fmt.Fprintf(&manifest, `apiVersion: v1
kind: Service
metadata: {name: echo, namespace: %s}
spec:
  selector: {app: echo}
  ports: [{port: 80, targetPort: 8080}]
`, ns)
	k.must(manifest.String(), "apply", "-f", "-")
	k.waitOrDescribe(ns, "the pods to become Ready", "wait", "--for=condition=Ready", "pod/on-host", "pod/on-guest", fmt.Sprintf("--timeout=%ds", int(clusterGuestWait.Seconds())))
	ip := map[string]string{}
	for _, p := range []string{"on-host", "on-guest"} {
		ip[p] = strings.TrimSpace(k.must("", "-n", ns, "get", "pod", p, "-o", "jsonpath={.status.podIP}"))
	}

	// kubeadm's KubeletConfiguration, one for both nodes, says cgroupfs
	// (the host's driver); the guest's minicri detects systemd, PID 1
	// there. The guest's kubelet must run with minicri's driver, taken from
	// its RuntimeConfig; minicri, for its part, refuses a cgroup parent of
	// the other driver, so the pod running on the guest shows its side.
	t.Run("GuestKubeletTakesTheRuntimesCgroupDriver", func(t *testing.T) {
		k := clusterKubectl{t: t, env: env}
		if got := clusterKubeletConfig(t, k, guest)["cgroupDriver"]; got != "systemd" {
			t.Errorf("the kubelet on %s runs with cgroupDriver %v, want systemd, minicri's there", guest, got)
		}
	})

	t.Run("PodToPodAcrossNodes", func(t *testing.T) {
		k := clusterKubectl{t: t, env: env}
		for from, to := range map[string]string{"on-host": "on-guest", "on-guest": "on-host"} {
			got, err := clusterHTTPGet(k, ns, from, ip[to], 8080, "/cgi-bin/ip")
			if err != nil {
				t.Errorf("%s (%s) to %s (%s): %v", from, ip[from], to, ip[to], err)
				continue
			}
			// The Kubernetes network model: a pod sees another's
			// address, not a node's. httpd writes an IPv4 client as
			// [::ffff:A.B.C.D].
			if seen := net.ParseIP(strings.Trim(got, "[]")); seen == nil || !seen.Equal(net.ParseIP(ip[from])) {
				t.Errorf("%s (%s) to %s (%s): the server saw %s, want the client pod's own address", from, ip[from], to, ip[to], got)
			}
		}
	})

	t.Run("ServiceAnswersFromBothNodes", func(t *testing.T) {
		k := clusterKubectl{t: t, env: env}
		svcIP := strings.TrimSpace(k.must("", "-n", ns, "get", "service", "echo", "-o", "jsonpath={.spec.clusterIP}"))
		for _, from := range []string{"on-host", "on-guest"} {
			seen := map[string]bool{}
			var last error
			deadline := time.Now().Add(clusterGuestWait)
			for len(seen) < 2 && time.Now().Before(deadline) {
				got, err := clusterHTTPGet(k, ns, from, svcIP, 80, "/")
				if err == nil {
					seen[got] = true
				}
				last = err
			}
			if !seen["on-host"] || !seen["on-guest"] {
				t.Errorf("the service echo (%s) asked from %s answered from %v, want on-host and on-guest (last error %v)", svcIP, from, seen, last)
			}
		}
	})

	t.Run("ExecLogsPortForwardOnTheGuest", func(t *testing.T) {
		k := clusterKubectl{t: t, env: env}
		if out := k.must("", "-n", ns, "logs", "on-guest"); !strings.Contains(out, "serving on-guest") {
			t.Errorf("kubectl logs on-guest = %q, want it to say serving on-guest", out)
		}
		if out := k.must("", "-n", ns, "exec", "on-guest", "--", "cat", "/tmp/www/index.html"); strings.TrimSpace(out) != "on-guest" {
			t.Errorf("kubectl exec on-guest cat = %q, want on-guest", out)
		}
		if _, err := k.run("", "-n", ns, "exec", "on-guest", "--", "sh", "-c", "exit 3"); err == nil || !strings.Contains(err.Error(), "exit status 3") {
			t.Errorf("kubectl exec on-guest of exit 3: %v, want exit status 3", err)
		}
		if got := clusterPortForward(t, env, ns, "on-guest", 8080, "/"); got != "on-guest" {
			t.Errorf("kubectl port-forward on-guest: GET / = %q, want on-guest", got)
		}
	})

	// The node registry (the cluster's images, read-only, on the node
	// bridge's address) serves the guest's minicri, and no pod: a pod's
	// connection to it is dropped on either node.
	t.Run("NodeRegistryClosedToPods", func(t *testing.T) {
		k := clusterKubectl{t: t, env: env}
		reg := env["NODE_REGISTRY"]
		addr, port, ok := strings.Cut(reg, ":")
		if !ok {
			t.Fatalf("NODE_REGISTRY %q: want ADDRESS:PORT", reg)
		}
		for _, from := range []string{"on-host", "on-guest"} {
			out, err := k.run("", "-n", ns, "exec", from, "--", "sh", "-c",
				fmt.Sprintf(`printf 'GET /v2/ HTTP/1.0\r\n\r\n' | nc -w 5 %s %s`, addr, port))
			if err == nil || strings.Contains(out, "HTTP/1.") {
				t.Errorf("pod %s reached the node registry %s: %v %q", from, reg, err, out)
			}
		}
	})
}

// clusterPortForward runs kubectl port-forward to pod's port on a free
// local port and returns the last word of the body of a GET of path
// through it.
func clusterPortForward(t *testing.T, env map[string]string, ns, pod string, port int, path string) string {
	t.Helper()
	cmd := exec.Command(env["KUBECTL"], "--kubeconfig", env["KUBECONFIG"], "-n", ns, "port-forward", "pod/"+pod, fmt.Sprintf(":%d", port))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// kubectl's complaints, for the failure messages.
	errFile, err := os.Create(filepath.Join(t.TempDir(), "port-forward.err"))
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	cmd.Stderr = errFile
	stderr := func() string { b, _ := os.ReadFile(errFile.Name()); return string(b) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	local := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+)`)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				local <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var lport string
	select {
	case lport = <-local:
	case <-time.After(clusterGuestWait):
		t.Fatalf("kubectl port-forward said no local port in %v: %s", clusterGuestWait, stderr())
	}
	client := &http.Client{Timeout: clusterGuestWait}
	resp, err := client.Get("http://127.0.0.1:" + lport + path)
	if err != nil {
		t.Fatalf("GET through kubectl port-forward: %v (kubectl: %s)", err, stderr())
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(body))
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}

// TestClusterDrainMovesPodsToTheHost drains the guest of a Deployment's
// pods: kubectl drain cordons it and evicts them, and the Deployment's
// replacements run on the host. The Deployment's node selector names a
// label the guest has first and the host gets before the drain, so that
// the pods start on the guest and may only move to the host.
func TestClusterDrainMovesPodsToTheHost(t *testing.T) {
	env, k, host, guest := twoNodeCluster(t)
	ns := clusterNamespace(t, k, "minicri-drain-")
	img := clusterBusybox(t, env, "drain")
	label := "minicri-e2e-drain"
	t.Cleanup(func() {
		// The guest stays cordoned, as hack/cluster.sh leaves it.
		k.run("", "cordon", guest)
		k.run("", "label", "node", host, guest, label+"-")
	})
	k.must("", "label", "node", guest, label+"="+ns)
	k.must("", "uncordon", guest)
	k.must(fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: drained, namespace: %[1]s}
spec:
  replicas: 2
  selector: {matchLabels: {app: drained}}
  template:
    metadata: {labels: {app: drained}}
    spec:
%[2]s`, ns, clusterIndent(clusterEchoPodSpec(img, "nodeSelector: {"+label+": "+ns+"}"), 6)), "apply", "-f", "-")
	wait := fmt.Sprintf("--timeout=%ds", int(clusterGuestWait.Seconds()))
	k.waitOrDescribe(ns, "the deployment to roll out on "+guest, "rollout", "status", "deployment/drained", wait)
	nodesOfPods := func() []string {
		return strings.Fields(k.must("", "-n", ns, "get", "pods", "-l", "app=drained", "--field-selector", "status.phase=Running",
			"-o", "jsonpath={.items[*].spec.nodeName}"))
	}
	if got := nodesOfPods(); len(got) != 2 || got[0] != guest || got[1] != guest {
		t.Fatalf("the deployment's pods run on %v, want both on %s", got, guest)
	}

	k.must("", "label", "node", host, label+"="+ns)
	if out, err := k.run("", "drain", guest, "--pod-selector", "app=drained", "--ignore-daemonsets", "--delete-emptydir-data", wait); err != nil {
		t.Fatalf("kubectl drain %s: %v\n%s", guest, err, out)
	}
	if got := strings.TrimSpace(k.must("", "get", "node", guest, "-o", "jsonpath={.spec.unschedulable}")); got != "true" {
		t.Errorf("%s after the drain: unschedulable %q, want true", guest, got)
	}
	k.eventually(clusterGuestWait, "the deployment's two pods Running on "+host, func(out string) bool {
		f := strings.Fields(out)
		return len(f) == 2 && f[0] == host && f[1] == host
	}, "-n", ns, "get", "pods", "-l", "app=drained", "-o", "jsonpath={.items[*].spec.nodeName}")
	k.waitOrDescribe(ns, "the deployment to be available again after the drain", "rollout", "status", "deployment/drained", wait)
}
