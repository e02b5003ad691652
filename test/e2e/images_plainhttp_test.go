//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	goruntime "runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// A registry on the LAN that speaks plain HTTP, stood for by a proxy to the
// test registry listening on a pod's address (10.x, private) inside the
// pod's network namespace. Without insecure = true the pull is refused,
// naming the way to allow it, and not one manifest request reaches the
// registry; with it, the pull works. Before, the registry client fell back
// to plain HTTP for any private address, and the first pull worked.
func TestPlainHTTPToALANRegistryNeedsInsecure(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	testimage.Push(t, testimage.Busybox(t), reg.Host()+"/e2e/busybox:latest")
	d := StartDaemon(t)
	d.bridgeNetwork(t)
	pod := d.runPod(t, d.podConfig("lan-registry"))
	resp, err := d.Runtime.PodSandboxStatus(context.Background(), pod, true)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Record struct{ Namespaces struct{ Net string } }
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil || info.Record.Namespaces.Net == "" {
		t.Fatalf("the pod's network namespace: %v (%s)", err, resp.GetInfo()["info"])
	}
	host := net.JoinHostPort(resp.GetStatus().GetNetwork().GetIp(), "5000")
	var manifests atomic.Int64
	serveProxyInNetns(t, info.Record.Namespaces.Net, host, reg.Host(), &manifests)
	ref := host + "/e2e/busybox:latest"

	_, err = d.pullErr(ref, nil)
	t.Logf("without insecure: %v", err)
	want := fmt.Sprintf("plain HTTP to %s refused", host)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "insecure = true") {
		t.Errorf("pull from plain HTTP on %s = %v; want refused with %q, naming insecure = true", host, err, want)
	}
	if n := manifests.Load(); n != 0 {
		t.Errorf("%d manifest requests reached the registry over plain HTTP", n)
	}

	allowed := StartDaemon(t, WithConfig(fmt.Sprintf("[image.registries.%q]\ninsecure = true\n", host)))
	allowed.pull(t, ref)
	if manifests.Load() == 0 {
		t.Errorf("the pull with insecure = true did not ask the LAN registry")
	}
}

// serveProxyInNetns listens on addr inside the network namespace at nsPath
// and proxies what comes in to upstream (on this host's loopback), counting
// manifest requests; it stops when the test ends.
func serveProxyInNetns(t *testing.T, nsPath, addr, upstream string, manifests *atomic.Int64) {
	t.Helper()
	type result struct {
		l   net.Listener
		err error
	}
	done := make(chan result)
	go func() {
		// Never unlocked: the thread ends with this goroutine, in the
		// pod's namespace, and no other goroutine ever runs on it. The
		// listening socket stays in that namespace.
		goruntime.LockOSThread()
		f, err := os.Open(nsPath)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("setns %s: %w", nsPath, err)}
			return
		}
		l, err := net.Listen("tcp", addr)
		done <- result{l, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, nsPath, r.err)
	}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: upstream})
	rp.ErrorLog = log.New(testWriter{t}, "lan registry proxy: ", 0)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.Contains(req.URL.Path, "/manifests/") {
			manifests.Add(1)
		}
		rp.ServeHTTP(w, req)
	})}
	go func() { _ = srv.Serve(r.l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// testWriter writes a logger's lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
