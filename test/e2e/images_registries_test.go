//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// writeHostsTOML writes DIR/HOST/hosts.toml.
func writeHostsTOML(t *testing.T, dir, host, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, host), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, host, "hosts.toml"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPullThroughHostsTOML: a TLS registry with a CA of the test's own that
// demands a client certificate is pulled from through a hosts.toml with ca
// and client; without them the pull fails naming the host; the edit takes
// effect at the next pull with the daemon's pid unchanged.
func TestPullThroughHostsTOML(t *testing.T) {
	reg := registry.Start(t, registry.Options{TLS: true, ClientCert: true})
	p := pushImage(t, reg, "mtls:v1", testimage.Busybox(t), registryTransport(reg))
	certsD := t.TempDir()
	d := StartDaemon(t, WithConfig(fmt.Sprintf("[image]\nregistry_config_path = %q\n", certsD)))
	pid := d.cmd.Process.Pid

	if _, err := d.pullErr(p.ref, nil); err == nil || !strings.Contains(err.Error(), "registry "+reg.Host()) {
		t.Fatalf("pull with no hosts.toml: %v; want a failure naming registry %s", err, reg.Host())
	}
	writeHostsTOML(t, certsD, reg.Host(), fmt.Sprintf("ca = %q\n", reg.CACertFile()))
	if _, err := d.pullErr(p.ref, nil); err == nil || !strings.Contains(err.Error(), "registry "+reg.Host()) {
		t.Fatalf("pull with the CA but no client certificate: %v; want a failure naming registry %s", err, reg.Host())
	}
	cert, key := reg.ClientCertFiles()
	writeHostsTOML(t, certsD, reg.Host(), fmt.Sprintf("ca = %q\nclient = [[%q, %q]]\n", reg.CACertFile(), cert, key))
	if got := d.pull(t, p.ref); got != p.id {
		t.Fatalf("PullImage through hosts.toml = %s, want %s", got, p.id)
	}
	if d.cmd.Process.Pid != pid || d.cmd.ProcessState != nil {
		t.Fatalf("the daemon was restarted (pid %d, was %d)", d.cmd.Process.Pid, pid)
	}
}

// TestPullWithAuthFile: the node's auth file gives credentials to a pull
// for which the request brings none.
func TestPullWithAuthFile(t *testing.T) {
	reg := registry.Start(t, registry.Options{Users: map[string]string{"node": "n0de"}})
	p := pushImage(t, reg, "private:v1", testimage.Busybox(t), basicAuth("node", "n0de"))
	authFile := filepath.Join(t.TempDir(), "auth.json")
	d := StartDaemon(t, WithConfig(fmt.Sprintf("[image]\nauth_file = %q\n", authFile)))
	if _, err := d.pullErr(p.ref, nil); err == nil {
		t.Fatal("pull from a registry with auth succeeded with no credentials and no auth file")
	}
	enc := base64.StdEncoding.EncodeToString([]byte("node:n0de"))
	if err := os.WriteFile(authFile, []byte(fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, reg.Host(), enc)), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := d.pull(t, p.ref); got != p.id {
		t.Fatalf("PullImage with the auth file = %s, want %s", got, p.id)
	}
}

// TestReloadOnSIGHUP: a SIGHUP after marking a registry insecure makes the
// next pull from it work, with the daemon's pid unchanged and a running pod
// untouched; a broken file on SIGHUP keeps the old config.
func TestReloadOnSIGHUP(t *testing.T) {
	reg := registry.Start(t, registry.Options{TLS: true})
	p := pushImage(t, reg, "tls:v1", testimage.Busybox(t), registryTransport(reg))
	d := StartDaemon(t, WithConfig("[image]\npull_timeout = \"5m\"\n"))
	configFile := filepath.Join(d.Dir, "minicri.toml")
	pid := d.cmd.Process.Pid
	podCfg := d.podConfig("reload")
	podCfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE}}
	pod := d.runPod(t, podCfg)

	if _, err := d.pullErr(p.ref, nil); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("pull from a self-signed registry: %v; want a certificate error", err)
	}
	sighup := func(file, want string) {
		t.Helper()
		if err := os.WriteFile(configFile, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		before := strings.Count(d.Output(), want)
		d.Signal(syscall.SIGHUP)
		waitFor(t, "the daemon to log "+want, 30*time.Second, func() bool { return strings.Count(d.Output(), want) > before })
	}
	sighup(fmt.Sprintf("[image]\npull_timeout = \"5m\"\n[image.registries.%q]\ninsecure = true\n", reg.Host()), "SIGHUP: configuration reloaded")
	if got := d.pull(t, p.ref); got != p.id {
		t.Fatalf("PullImage after the reload = %s, want %s", got, p.id)
	}
	sighup("[image\n", "SIGHUP: configuration not reloaded")
	if got := d.pull(t, p.ref); got != p.id {
		t.Fatalf("PullImage after a refused reload = %s, want %s (the old config in force)", got, p.id)
	}
	if d.cmd.Process.Pid != pid || d.cmd.ProcessState != nil {
		t.Fatalf("the daemon was restarted (pid %d, was %d)", d.cmd.Process.Pid, pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := d.Runtime.PodSandboxStatus(ctx, pod, false)
	if err != nil || st.GetStatus().GetState() != runtime.PodSandboxState_SANDBOX_READY {
		t.Fatalf("pod after the reloads: %v, %v; want ready", st.GetStatus().GetState(), err)
	}
}

// TestReloadLogLevelOnSIGHUP: log_level edited in the file takes effect on
// SIGHUP (debug logs a line per call), with the daemon's pid unchanged.
func TestReloadLogLevelOnSIGHUP(t *testing.T) {
	d := NewDaemon(t, WithConfig("log_level = \"info\"\n"))
	for i := 0; i+1 < len(d.args); i++ { // the harness's --log-level flag would win over the file
		if d.args[i] == "--log-level" {
			d.args = append(d.args[:i], d.args[i+2:]...)
			break
		}
	}
	d.Start()
	pid := d.cmd.Process.Pid
	version := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := d.Runtime.Version(ctx, ""); err != nil {
			t.Fatal(err)
		}
	}
	const debugCall = "method=/runtime.v1.RuntimeService/Version"
	version()
	if strings.Contains(d.Output(), debugCall) {
		t.Fatal("a call was logged at log_level info")
	}
	if err := os.WriteFile(filepath.Join(d.Dir, "minicri.toml"), []byte("log_level = \"debug\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.Signal(syscall.SIGHUP)
	waitFor(t, "the reload", 30*time.Second, func() bool { return strings.Contains(d.Output(), "SIGHUP: configuration reloaded") })
	version()
	waitFor(t, "a debug line for the call", 30*time.Second, func() bool { return strings.Contains(d.Output(), debugCall) })
	if d.cmd.Process.Pid != pid || d.cmd.ProcessState != nil {
		t.Fatalf("the daemon was restarted (pid %d, was %d)", d.cmd.Process.Pid, pid)
	}
}
