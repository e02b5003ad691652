//go:build cluster

// The checks of the kubeadm cluster on minicri (hack/cluster.sh,
// docs/cluster.md), run against a cluster that is up:
//
//	make cluster-test    # hack/cluster.sh up, these tests, hack/cluster.sh down
//
// They drive the cluster only as a user would, with kubectl and the admin
// kubeconfig, and need nothing of the e2e harness: the build tag is
// `cluster`, so `make e2e` (tag e2e) does not run them; with both tags they
// build beside the suite (every name here starts with cluster).
package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/minicri/minicri/test/testimage"
)

// clusterEnvFile is what hack/cluster.sh up writes once the cluster is up:
// KUBECONFIG, KUBECTL, REGISTRY.
func clusterEnvFile() string {
	if f := os.Getenv("MINICRI_CLUSTER_ENV"); f != "" {
		return f
	}
	return "/var/lib/minicri-cluster/env"
}

// clusterEnv is the cluster's env file as a map; the test is skipped when no
// cluster is up.
func clusterEnv(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(clusterEnvFile())
	if err != nil {
		t.Skipf("no cluster up (make cluster): %v", err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	for _, k := range []string{"KUBECONFIG", "KUBECTL", "REGISTRY"} {
		if env[k] == "" {
			t.Fatalf("%s names no %s", clusterEnvFile(), k)
		}
	}
	return env
}

// clusterKubectl runs kubectl against the cluster; stdin may be empty.
type clusterKubectl struct {
	t   *testing.T
	env map[string]string
}

func (k clusterKubectl) run(stdin string, args ...string) (string, error) {
	cmd := exec.Command(k.env["KUBECTL"], append([]string{"--kubeconfig", k.env["KUBECONFIG"]}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), err
}

func (k clusterKubectl) must(stdin string, args ...string) string {
	k.t.Helper()
	out, err := k.run(stdin, args...)
	if err != nil {
		k.t.Fatal(err)
	}
	return out
}

// eventually runs kubectl until check accepts its output, for up to timeout.
func (k clusterKubectl) eventually(timeout time.Duration, what string, check func(string) bool, args ...string) string {
	k.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, err := k.run("", args...)
		if err == nil && check(out) {
			return out
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("gave up after %v waiting for %s: last answer %q, %v", timeout, what, out, err)
		}
		time.Sleep(time.Second)
	}
}

// clusterBusybox pushes the busybox test image to the cluster's registry as
// busybox:TAG and returns its name there.
func clusterBusybox(t *testing.T, env map[string]string, tag string) string {
	t.Helper()
	img := env["REGISTRY"] + "/busybox:" + tag
	testimage.Push(t, testimage.Busybox(t), img)
	return img
}

// clusterNamespace makes a namespace of the test's own, deleted at its end.
func clusterNamespace(t *testing.T, k clusterKubectl, prefix string) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	ns := prefix + hex.EncodeToString(b)
	k.must("", "create", "namespace", ns)
	t.Cleanup(func() {
		if _, err := k.run("", "delete", "namespace", ns, "--wait=true", "--timeout=300s"); err != nil {
			t.Errorf("delete the test's namespace: %v", err)
		}
	})
	return ns
}

// waitOrDescribe runs a kubectl command in ns that waits (rollout status,
// wait --for); when it fails, the test fails saying what it waited for,
// with the namespace's pods described.
func (k clusterKubectl) waitOrDescribe(ns, what string, args ...string) {
	k.t.Helper()
	if out, err := k.run("", append([]string{"-n", ns}, args...)...); err != nil {
		desc, _ := k.run("", "-n", ns, "describe", "pods")
		k.t.Fatalf("%s: %v\n%s\n%s", what, err, out, desc)
	}
}

// TestClusterServesADeployment is the smoke check of a cluster: a Deployment
// of two pods from an image the kubelet pulls through minicri, a ClusterIP
// Service in front of them that answers (kube-proxy's rules), its name
// resolved by CoreDNS from a pod, kubectl exec and logs through the API
// server, the kubelet and minicri's streaming server.
func TestClusterServesADeployment(t *testing.T) {
	env := clusterEnv(t)
	k := clusterKubectl{t: t, env: env}
	img := clusterBusybox(t, env, "smoke")
	ns := clusterNamespace(t, k, "minicri-smoke-")
	// Each pod serves its own name over HTTP with busybox's httpd, and says
	// so on stdout first (for kubectl logs).
	k.must(fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: %[1]s}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: web
        image: %[2]s
        command: ["/bin/sh", "-c", "mkdir -p /tmp/www && hostname >/tmp/www/index.html && echo serving $(hostname) && exec busybox httpd -f -p 8080 -h /tmp/www"]
        ports: [{containerPort: 8080}]
        readinessProbe:
          tcpSocket: {port: 8080}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: %[1]s}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
`, ns, img), "apply", "-f", "-")
	k.waitOrDescribe(ns, "the deployment to roll out", "rollout", "status", "deployment/web", "--timeout=180s")
	pods := strings.Fields(k.must("", "-n", ns, "get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].metadata.name}"))
	if len(pods) != 2 {
		t.Fatalf("pods of the deployment: %q, want 2", pods)
	}
	ips := strings.Fields(k.must("", "-n", ns, "get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].status.podIP}"))
	if len(ips) != 2 || ips[0] == ips[1] {
		t.Fatalf("pod IPs %q: want two different ones", ips)
	}

	// kubectl logs: what the container printed, through the kubelet's
	// reading of minicri's CRI log file.
	if out := k.must("", "-n", ns, "logs", pods[0]); !strings.Contains(out, "serving "+pods[0]) {
		t.Errorf("kubectl logs %s = %q, want it to say serving %s", pods[0], out, pods[0])
	}
	// kubectl exec: a command in the container, its output and exit code.
	if out := k.must("", "-n", ns, "exec", pods[0], "--", "cat", "/tmp/www/index.html"); strings.TrimSpace(out) != pods[0] {
		t.Errorf("kubectl exec cat = %q, want %q", out, pods[0])
	}
	if _, err := k.run("", "-n", ns, "exec", pods[0], "--", "sh", "-c", "exit 3"); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("kubectl exec of exit 3: %v, want exit status 3", err)
	}

	// The service's name, resolved by CoreDNS (the pod's resolv.conf names
	// the cluster DNS service), and its ClusterIP answering (kube-proxy):
	// asked enough times, both pods answer.
	svcIP := strings.TrimSpace(k.must("", "-n", ns, "get", "service", "web", "-o", "jsonpath={.spec.clusterIP}"))
	fqdn := "web." + ns + ".svc.cluster.local"
	k.eventually(60*time.Second, "CoreDNS to resolve "+fqdn+" to "+svcIP, func(out string) bool {
		return strings.Contains(out, svcIP)
	}, "-n", ns, "exec", pods[1], "--", "nslookup", fqdn)
	// By address, with nc: busybox-static's wget crashes in glibc's static
	// NSS lookups (of the name, and of the service "http").
	seen := map[string]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for len(seen) < 2 {
		out, err := k.run("", "-n", ns, "exec", pods[1], "--", "sh", "-c", `printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 `+svcIP+` 80`)
		if lines := strings.Fields(out); err == nil && len(lines) > 0 {
			seen[lines[len(lines)-1]] = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service web (%s) answered from %v, want both pods %v (last error %v)", svcIP, seen, pods, err)
		}
	}
	for _, p := range pods {
		if !seen[p] {
			t.Errorf("the service answered from %v, never from %s", seen, p)
		}
	}
}

// TestClusterSystemPodsRunInMinicri checks that the control plane, kube-proxy
// and CoreDNS are Running pods of the node, whose runtime is minicri.
func TestClusterSystemPodsRunInMinicri(t *testing.T) {
	env := clusterEnv(t)
	k := clusterKubectl{t: t, env: env}
	rt := k.must("", "get", "nodes", "-o", "jsonpath={.items[*].status.nodeInfo.containerRuntimeVersion}")
	if !strings.HasPrefix(rt, "minicri://") || strings.HasSuffix(rt, "Unknown") {
		t.Errorf("the node's container runtime is %q, want minicri:// and the version minicri gives", rt)
	}
	out := k.must("", "-n", "kube-system", "get", "pods", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.phase} {.status.containerStatuses[0].containerID}{"\n"}{end}`)
	for _, c := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "coredns"} {
		found := false
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) == 3 && strings.HasPrefix(f[0], c+"-") {
				found = true
				if f[1] != "Running" || !strings.HasPrefix(f[2], "minicri://") {
					t.Errorf("%s: phase %s, container %s; want Running in minicri", f[0], f[1], f[2])
				}
			}
		}
		if !found {
			t.Errorf("no %s pod in kube-system:\n%s", c, out)
		}
	}
}
