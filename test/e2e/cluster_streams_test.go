//go:build cluster

package e2e

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

// clusterRESTConfig is the API server and the admin's credentials of the
// cluster's kubeconfig, as kubectl reads them, for kubectl's stream clients.
func clusterRESTConfig(t *testing.T, k clusterKubectl) *rest.Config {
	t.Helper()
	field := func(path string) string {
		return strings.TrimSpace(k.must("", "config", "view", "--raw", "--minify", "-o", "jsonpath={"+path+"}"))
	}
	decoded := func(path string) []byte {
		b, err := base64.StdEncoding.DecodeString(field(path))
		if err != nil || len(b) == 0 {
			t.Fatalf("the kubeconfig's %s: %v (want base64 data)", path, err)
		}
		return b
	}
	return &rest.Config{
		Host: field(".clusters[0].cluster.server"),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   decoded(".clusters[0].cluster.certificate-authority-data"),
			CertData: decoded(".users[0].user.client-certificate-data"),
			KeyData:  decoded(".users[0].user.client-key-data"),
		},
	}
}

// clusterPodURL is the API server's URL of a pod's subresource (exec,
// attach, portforward) with the query q.
func clusterPodURL(cfg *rest.Config, ns, pod, sub string, q url.Values) string {
	u := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s/%s", strings.TrimRight(cfg.Host, "/"), ns, pod, sub)
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// TestClusterPodStreamsOverSPDYAndWebSocket drives exec, attach and
// port-forward through the API server, the kubelet and minicri's streaming
// server, with kubectl's clients over each protocol alone (kubectl itself
// falls back from WebSocket to SPDY, which would hide a broken WebSocket
// path); and kubectl debug's ephemeral container, in the target
// container's process namespace.
func TestClusterPodStreamsOverSPDYAndWebSocket(t *testing.T) {
	env := clusterEnv(t)
	k := clusterKubectl{t: t, env: env}
	cfg := clusterRESTConfig(t, k)
	img := clusterBusybox(t, env, "streams")
	ns := clusterNamespace(t, k, "minicri-streams-")
	// web serves the pod's name over HTTP; reader answers each line of its
	// stdin with "got LINE" (attach).
	k.must(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: streams, namespace: %[1]s}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: web
    image: %[2]s
    command: ["/bin/sh", "-c", "mkdir -p /tmp/www && hostname >/tmp/www/index.html && exec busybox httpd -f -p 8080 -h /tmp/www"]
    readinessProbe:
      tcpSocket: {port: 8080}
      periodSeconds: 1
  - name: reader
    image: %[2]s
    stdin: true
    command: ["/bin/sh", "-c", "while read l; do echo \"got $l\"; done"]
`, ns, img), "apply", "-f", "-")
	k.waitOrDescribe(ns, "the pod streams to be Ready", "wait", "--for=condition=Ready", "pod/streams", "--timeout=180s")

	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			t.Run("Exec", func(t *testing.T) {
				q := url.Values{"container": {"reader"}, "stdin": {"true"}, "stdout": {"true"}, "stderr": {"true"}}
				for _, c := range []string{"sh", "-c", "cat; echo to-stderr >&2; exit 3"} {
					q.Add("command", c)
				}
				var stdout, stderr lockedBuffer
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				err := executorWith(t, cfg, proto, clusterPodURL(cfg, ns, "streams", "exec", q)).StreamWithContext(ctx,
					remotecommand.StreamOptions{Stdin: strings.NewReader("hello over " + proto + "\n"), Stdout: &stdout, Stderr: &stderr})
				var exit interface{ ExitStatus() int }
				if !errors.As(err, &exit) || exit.ExitStatus() != 3 {
					t.Errorf("exec over %s: %v, want exit code 3", proto, err)
				}
				if got, want := stdout.String(), "hello over "+proto+"\n"; got != want {
					t.Errorf("exec over %s: stdout %q, want %q (stdin through cat)", proto, got, want)
				}
				if got := stderr.String(); got != "to-stderr\n" {
					t.Errorf("exec over %s: stderr %q, want %q", proto, got, "to-stderr\n")
				}
			})
			t.Run("Attach", func(t *testing.T) {
				q := url.Values{"container": {"reader"}, "stdin": {"true"}, "stdout": {"true"}, "stderr": {"true"}}
				attachAndType(t, cfg, proto, clusterPodURL(cfg, ns, "streams", "attach", q), "hello-"+proto)
			})
			t.Run("PortForward", func(t *testing.T) {
				local := forwardPortsOver(t, cfg, proto, clusterPodURL(cfg, ns, "streams", "portforward", nil), 8080)
				client := &http.Client{Timeout: 30 * time.Second}
				// Twice: each connection is a stream of its own in the one forward.
				for i := 0; i < 2; i++ {
					resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/", local))
					if err != nil {
						t.Fatalf("GET %d through the port-forward over %s: %v", i+1, proto, err)
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil || strings.TrimSpace(string(body)) != "streams" {
						t.Errorf("GET %d through the port-forward over %s: %q, %v; want the pod's name", i+1, proto, body, err)
					}
				}
			})
		})
	}
	// Attaching and detaching left the reader running, its stdin open.
	if out := k.must("", "-n", ns, "get", "pod", "streams", "-o", `jsonpath={.status.containerStatuses[?(@.name=="reader")].restartCount}`); strings.TrimSpace(out) != "0" {
		t.Errorf("the reader restarted %s times during the attaches, want 0", out)
	}

	// kubectl debug: an ephemeral container in the reader's process
	// namespace (--target) sees the reader's process as its PID 1.
	t.Run("DebugEphemeralContainer", func(t *testing.T) {
		k := clusterKubectl{t: t, env: env}
		k.must("", "-n", ns, "debug", "streams", "--image="+img, "-c", "debugger", "--target=reader", "--profile=general",
			"--", "sh", "-c", `echo "pid 1: $(tr '\0' ' ' </proc/1/cmdline)"; echo debugged`)
		k.eventually(3*time.Minute, "the ephemeral container debugger to exit 0", func(out string) bool {
			return strings.TrimSpace(out) == "0"
		}, "-n", ns, "get", "pod", "streams", "-o", `jsonpath={.status.ephemeralContainerStatuses[?(@.name=="debugger")].state.terminated.exitCode}`)
		out := k.must("", "-n", ns, "logs", "streams", "-c", "debugger")
		if !strings.Contains(out, "pid 1: /bin/sh -c while read l") || !strings.Contains(out, "debugged") {
			t.Errorf("the debugger's log %q: want the reader's shell as its PID 1, then debugged", out)
		}
		if got := strings.TrimSpace(k.must("", "-n", ns, "get", "pod", "streams", "-o", "jsonpath={.status.phase}")); got != "Running" {
			t.Errorf("the pod after the debugger: phase %s, want Running", got)
		}
	})
}
