//go:build e2e

package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// oldCNIPlugins makes a plugin directory whose plugins speak the CNI spec
// only up to 0.4.0, as Debian 11's do (testdata/oldcni), each running the
// node's real plugin of its name.
func oldCNIPlugins(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		t.Skip("CNI plugins not installed in /usr/lib/cni")
	}
	wrapper, err := filepath.Abs(filepath.Join("testdata", "oldcni", "plugin"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"bridge", "host-local", "portmap", "loopback"} {
		if err := os.Symlink(wrapper, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// On a node whose plugins speak no CNI version after 0.4.0, a config that
// declares it is valid under 0.4.0 too (cniVersions, as minicri's contrib
// config does) gives pods a network, run at 0.4.0; one that declares only
// 1.0.0 keeps NetworkReady false, naming the plugin and what it speaks.
// Before, the network read as ready and every RunPodSandbox failed at ADD
// with "incompatible CNI versions".
func TestOldCNIPluginsGetConfigAtVersionTheySpeak(t *testing.T) {
	d := StartDaemon(t, WithArgs("--cni-bin-dirs", oldCNIPlugins(t)))
	ref := busyboxRef(t)
	d.pull(t, ref)
	conf, subnet := d.writeBridgeNetwork(t, false)
	t.Cleanup(func() {
		if ips := reservedIPs(filepath.Join(d.Dir, "ipam")); len(ips) > 0 {
			t.Errorf("IP addresses still allocated after the pods were removed: %v", ips)
		}
	})
	if c := d.conditions(t)[runtime.NetworkReady]; !c.GetStatus() {
		t.Fatalf("NetworkReady = %+v, want true: the config declares 0.4.0, which the plugins speak", c)
	}
	podCfg := d.podConfig("oldcni")
	pod := d.runPod(t, podCfg)
	resp, err := d.Runtime.PodSandboxStatus(context.Background(), pod, false)
	if err != nil {
		t.Fatal(err)
	}
	_, ipnet, _ := net.ParseCIDR(subnet)
	if ip := net.ParseIP(resp.GetStatus().GetNetwork().GetIp()); ip == nil || !ipnet.Contains(ip) {
		t.Errorf("pod IP %q, want one in %s", resp.GetStatus().GetNetwork().GetIp(), subnet)
	}
	if !strings.Contains(d.Output(), "runs at CNI version 0.4.0") {
		t.Errorf("the log does not say the network runs at 0.4.0:\n%s", d.Output())
	}

	// The same network, declared for 1.0.0 only.
	strict := strings.Replace(string(conf), `"cniVersions": ["0.4.0", "1.0.0"],`, "", 1)
	if strict == string(conf) {
		t.Fatalf("the e2e conflist declares no cniVersions:\n%s", conf)
	}
	if err := os.WriteFile(filepath.Join(d.Dir, "cni", "10-e2e.conflist"), []byte(strict), 0o644); err != nil {
		t.Fatal(err)
	}
	c := d.conditions(t)[runtime.NetworkReady]
	for _, want := range []string{"10-e2e.conflist", "plugin bridge", "0.4.0", "declares only 1.0.0"} {
		if c.GetStatus() || !strings.Contains(c.GetMessage(), want) {
			t.Errorf("NetworkReady = %+v, want false naming %q", c, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if id, err := d.Runtime.RunPodSandbox(ctx, d.podConfig("oldcni-strict"), ""); status.Code(err) != codes.FailedPrecondition {
		if err == nil {
			_ = d.Runtime.StopPodSandbox(ctx, id)
			_ = d.Runtime.RemovePodSandbox(ctx, id)
		}
		t.Errorf("RunPodSandbox on the strict config: %v, want FailedPrecondition", err)
	}
	if !strings.Contains(d.Output(), "pods get no network") {
		t.Errorf("the log does not say why pods get no network:\n%s", d.Output())
	}
}
