//go:build e2e

package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
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

	"github.com/minicri/minicri/internal/osthread"
	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// ControlPlane is a real etcd and a real kube-apiserver on loopback, for the
// kubelet tests that need the API: mirror pods, events, node status. Both are
// built with the kubelet (hack/build-kubelet.sh puts them beside it).
type ControlPlane struct {
	Dir        string
	Kubeconfig string // a kubeconfig with a token the API server trusts
	Port       int    // the API server's secure port on 127.0.0.1
	token      string
	client     *http.Client
}

// newAPINode is a kubeletNode whose kubelet works for a real API server:
// a daemon on a bridge network, the busybox image in a registry, etcd and
// kube-apiserver with the namespace e2e, and a kubelet that has registered
// its node and watches its pods. kubeletArgs go on the kubelet's command line.
func newAPINode(t *testing.T, kubeletArgs ...string) (*kubeletNode, *ControlPlane) {
	t.Helper()
	kubeletBinary(t)
	removeHostPortChainsAtEnd(t)
	d := StartDaemon(t)
	d.bridgeNetwork(t)
	reg := registry.Start(t, registry.Options{})
	ref := reg.Host() + "/e2e/busybox:latest"
	testimage.Push(t, testimage.Busybox(t), ref)
	cp := startControlPlane(t, d.Dir)
	cp.namespace(t, "e2e")
	k := startKubelet(t, d, append([]string{"--kubeconfig", cp.Kubeconfig, "--register-node=true"}, kubeletArgs...)...)
	cp.waitNodeReady(t, k.NodeName)
	// Its pod watch starts a moment after: a static pod that runs before
	// the watch brings its mirror pod gets its status written only at the
	// status manager's next resync, 10 s later.
	waitFor(t, "the kubelet watching the API", time.Minute, func() bool {
		data, _ := os.ReadFile(k.log)
		return strings.Contains(string(data), `"Watching apiserver"`)
	})
	return &kubeletNode{d: d, k: k, ref: ref}, cp
}

// controlPlaneBinary is a binary the kubelet build puts beside the kubelet.
func controlPlaneBinary(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(filepath.Dir(kubeletBinary(t)), name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s: %v (hack/build-kubelet.sh builds it beside the kubelet)", name, err)
	}
	return bin
}

// startControlPlane starts etcd and kube-apiserver below dir, waits until
// the API server answers, and stops both (by pid) when the test ends. Only
// loopback is listened on; authorization is AlwaysAllow for the one token.
func startControlPlane(t *testing.T, dir string) *ControlPlane {
	t.Helper()
	etcdBin := controlPlaneBinary(t, "etcd")
	apiserverBin := controlPlaneBinary(t, "kube-apiserver")
	cp := &ControlPlane{Dir: filepath.Join(dir, "controlplane")}
	if err := os.MkdirAll(cp.Dir, 0o700); err != nil {
		t.Fatal(err)
	}

	clientPort, peerPort := freeTCPPort(t), freeTCPPort(t)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	startLogged(t, filepath.Join(cp.Dir, "etcd.log"), etcdBin,
		"--name", "e2e", "--data-dir", filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-cluster", fmt.Sprintf("e2e=http://127.0.0.1:%d", peerPort),
		"--unsafe-no-fsync", "--log-level", "warn")

	token := randomHex(16)
	tokens := filepath.Join(cp.Dir, "tokens.csv")
	writeFile(t, tokens, token+",e2e-admin,e2e-admin,system:masters\n", 0o600)
	saKey := filepath.Join(cp.Dir, "sa.key")
	writeServiceAccountKey(t, saKey)

	cp.Port = freeTCPPort(t)
	startLogged(t, filepath.Join(cp.Dir, "kube-apiserver.log"), apiserverBin,
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", fmt.Sprint(cp.Port), "--cert-dir", filepath.Join(cp.Dir, "pki"),
		"--token-auth-file", tokens, "--authorization-mode", "AlwaysAllow",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", saKey, "--service-account-signing-key-file", saKey,
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--endpoint-reconciler-type", "none",
		"--disable-admission-plugins", "ServiceAccount",
		"--v", "1")

	cp.Kubeconfig = filepath.Join(cp.Dir, "kubeconfig")
	writeFile(t, cp.Kubeconfig, fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://127.0.0.1:%d
    insecure-skip-tls-verify: true
users:
- name: e2e
  user:
    token: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: e2e}
current-context: e2e
`, cp.Port, token), 0o600)
	cp.token = token
	cp.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// The API server serves a self-signed certificate it made at start.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	cp.waitReady(t, filepath.Join(cp.Dir, "kube-apiserver.log"))
	return cp
}

// waitReady polls until the API server is ready and has made its default
// namespace.
func (cp *ControlPlane) waitReady(t *testing.T, log string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		code, body, err := cp.call(http.MethodGet, "/readyz", nil)
		if err == nil && code == http.StatusOK {
			code, body, err = cp.call(http.MethodGet, "/api/v1/namespaces/default", nil)
			if err == nil && code == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(log)
			t.Fatalf("kube-apiserver not ready after 90 s: %d %v %s\n%s", code, err, body, tail(string(data), 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// call sends one request to the API server, with the token; body, when not
// nil, goes as JSON (a PATCH as a strategic merge patch).
func (cp *ControlPlane) call(method, path string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, fmt.Sprintf("https://127.0.0.1:%d%s", cp.Port, path), r)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+cp.token)
	req.Header.Set("Content-Type", "application/json")
	if method == http.MethodPatch {
		req.Header.Set("Content-Type", "application/strategic-merge-patch+json")
	}
	resp, err := cp.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// mustCall is call for a request that must succeed (2xx).
func (cp *ControlPlane) mustCall(t *testing.T, method, path string, body any) []byte {
	t.Helper()
	code, data, err := cp.call(method, path, body)
	if err != nil || code/100 != 2 {
		t.Fatalf("%s %s: %d %v %s", method, path, code, err, data)
	}
	return data
}

// namespace makes a namespace for the test's pods.
func (cp *ControlPlane) namespace(t *testing.T, name string) {
	t.Helper()
	cp.mustCall(t, http.MethodPost, "/api/v1/namespaces", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// pod is the API's pod namespace/name; nil when there is none.
func (cp *ControlPlane) pod(t *testing.T, namespace, name string) *corev1.Pod {
	t.Helper()
	code, data, err := cp.call(http.MethodGet, "/api/v1/namespaces/"+namespace+"/pods/"+name, nil)
	if err == nil && code == http.StatusNotFound {
		return nil
	}
	if err != nil || code != http.StatusOK {
		t.Fatalf("get pod %s/%s: %d %v %s", namespace, name, code, err, data)
	}
	var p corev1.Pod
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// waitNodeReady waits until a kubelet has registered its node and reports
// it ready, by when it also watches its pods in the API.
func (cp *ControlPlane) waitNodeReady(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, data, err := cp.call(http.MethodGet, "/api/v1/nodes/"+name, nil)
		if err == nil && code == http.StatusOK {
			var node corev1.Node
			if err := json.Unmarshal(data, &node); err != nil {
				t.Fatal(err)
			}
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s not ready in the API after a minute: %d %v %s", name, code, err, data)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createPod makes a pod in the API.
func (cp *ControlPlane) createPod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	cp.mustCall(t, http.MethodPost, "/api/v1/namespaces/"+pod.Namespace+"/pods", pod)
}

// waitPod polls the API's pod until cond holds, and returns it.
func (cp *ControlPlane) waitPod(t *testing.T, namespace, name, what string, timeout time.Duration, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p := cp.pod(t, namespace, name)
		if p != nil && cond(p) {
			return p
		}
		if time.Now().After(deadline) {
			var st any
			if p != nil {
				st = p.Status
			}
			t.Fatalf("pod %s/%s: %s: not within %s; status: %+v", namespace, name, what, timeout, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// deletePod deletes a pod from the API with this grace period.
func (cp *ControlPlane) deletePod(t *testing.T, namespace, name string, grace int64) {
	t.Helper()
	cp.mustCall(t, http.MethodDelete, "/api/v1/namespaces/"+namespace+"/pods/"+name, &metav1.DeleteOptions{GracePeriodSeconds: &grace})
}

// startLogged starts a process with its output in log, and kills it by pid
// (and waits for it) when the test ends.
func startLogged(t *testing.T, log string, bin string, args ...string) {
	t.Helper()
	out, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	exited, err := osthread.StartChild(cmd) // see StartChild: Pdeathsig follows a thread
	if err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		if t.Failed() {
			data, _ := os.ReadFile(log)
			t.Logf("--- %s (tail) ---\n%s", filepath.Base(log), tail(string(data), 30))
		}
	})
}

func writeServiceAccountKey(t *testing.T, path string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der := x509.MarshalPKCS1PrivateKey(key)
	writeFile(t, path, string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: der})), 0o600)
}

func writeFile(t *testing.T, path, body string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
