package network

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/osthread"
)

// Host state the CNI plugins change globally and the tests put back:
// the bridge plugin turns on IPv4 forwarding for a gateway, and portmap adds
// top-level nat chains it never removes.
const ipForwardFile = "/proc/sys/net/ipv4/ip_forward"

var portmapChains = []string{"CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-MASQ"}

func TestMain(m *testing.M) {
	forward, _ := os.ReadFile(ipForwardFile)
	chainsBefore := natChains()
	code := m.Run()
	if len(forward) > 0 {
		_ = os.WriteFile(ipForwardFile, forward, 0o644)
	}
	removeNewPortmapChains(chainsBefore)
	os.Exit(code)
}

// natRules returns `iptables -t nat -S`, or nil without iptables.
func natRules() []string {
	out, err := exec.Command("iptables", "-w", "-t", "nat", "-S").Output()
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func natChains() map[string]bool {
	chains := map[string]bool{}
	for _, rule := range natRules() {
		if f := strings.Fields(rule); len(f) >= 2 && f[0] == "-N" {
			chains[f[1]] = true
		}
	}
	return chains
}

// removeNewPortmapChains deletes the portmap chains these tests created and
// the jumps to them, unless a per-pod chain that was not there before (a pod
// of a concurrent run) still hangs off them.
func removeNewPortmapChains(before map[string]bool) {
	after := natChains()
	isNew := func(chain string) bool { return after[chain] && !before[chain] }
	for chain := range after {
		if strings.HasPrefix(chain, "CNI-DN-") && !before[chain] {
			return
		}
	}
	for _, rule := range natRules() {
		f := strings.Fields(rule)
		if len(f) < 2 || f[0] != "-A" || isNew(f[1]) || !isNew(f[len(f)-1]) {
			continue
		}
		// -S output is quoted for a shell: let one parse it.
		_ = exec.Command("sh", "-c", "iptables -w -t nat -D "+strings.TrimPrefix(rule, "-A ")).Run()
	}
	for _, chain := range portmapChains {
		if isNew(chain) {
			_ = exec.Command("iptables", "-w", "-t", "nat", "-F", chain).Run()
		}
	}
	for _, chain := range portmapChains {
		if isNew(chain) {
			_ = exec.Command("iptables", "-w", "-t", "nat", "-X", chain).Run()
		}
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// testNetwork is a bridge network of its own for one test: a unique bridge,
// a free /24 and a host-local data dir in a temp dir.
type testNetwork struct {
	name     string
	bridge   string
	subnet   *net.IPNet
	confDir  string
	cacheDir string
	dataDir  string
}

func newTestNetwork(t *testing.T) *testNetwork {
	t.Helper()
	requireRoot(t)
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		t.Skip("CNI plugins not installed in /usr/lib/cni")
	}
	tmp := t.TempDir()
	n := &testNetwork{
		name:     "mctest-" + randomHex(4),
		bridge:   "mcbr" + randomHex(4),
		subnet:   freeSubnet(t),
		confDir:  filepath.Join(tmp, "net.d"),
		cacheDir: filepath.Join(tmp, "cache"),
		dataDir:  filepath.Join(tmp, "ipam"),
	}
	if err := os.MkdirAll(n.confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := net.InterfaceByName(n.bridge); err == nil {
			if out, err := exec.Command("ip", "link", "del", n.bridge).CombinedOutput(); err != nil {
				t.Errorf("delete bridge %s: %v: %s", n.bridge, err, out)
			}
		}
	})
	return n
}

// freeSubnet picks a 10.201.X.0/24 that no host interface is on.
func freeSubnet(t *testing.T) *net.IPNet {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		var b [1]byte
		_, _ = rand.Read(b[:])
		_, subnet, _ := net.ParseCIDR(fmt.Sprintf("10.201.%d.0/24", b[0]))
		taken := false
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && subnet.Contains(ipn.IP) {
				taken = true
			}
		}
		if !taken {
			return subnet
		}
	}
	t.Fatal("no free 10.201.X.0/24 subnet")
	return nil
}

// bridgePlugin is the first plugin of every test network.
func (n *testNetwork) bridgePlugin() string {
	return fmt.Sprintf(`{"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
	  "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}}`,
		n.bridge, n.dataDir, n.subnet.String())
}

// conflist returns a config list of the bridge plugin followed by more.
func (n *testNetwork) conflist(more ...string) string {
	plugins := append([]string{n.bridgePlugin()}, more...)
	return fmt.Sprintf(`{"cniVersion": "1.0.0", "name": %q, "plugins": [%s]}`, n.name, strings.Join(plugins, ",\n"))
}

const portmapPlugin = `{"type": "portmap", "capabilities": {"portMappings": true}}`

func (n *testNetwork) writeConf(t *testing.T, file, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(n.confDir, file), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (n *testNetwork) newCNI() *CNI {
	return NewCNI(n.confDir, []string{"/opt/cni/bin", "/usr/lib/cni"}, n.cacheDir, nil)
}

// reservedIPs lists the addresses host-local holds in this network.
func (n *testNetwork) reservedIPs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(n.dataDir, n.name))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, e := range entries {
		if net.ParseIP(e.Name()) != nil {
			ips = append(ips, e.Name())
		}
	}
	return ips
}

// bridgePorts lists the veths plugged into the test bridge.
func (n *testNetwork) bridgePorts(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join("/sys/class/net", n.bridge, "brif"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var ports []string
	for _, e := range entries {
		ports = append(ports, e.Name())
	}
	return ports
}

// pinNetNS pins a network namespace for one test and unpins it at cleanup.
func pinNetNS(t *testing.T) Namespaces {
	t.Helper()
	ns, err := PinNamespaces(filepath.Join(t.TempDir(), "ns"), []NamespaceKind{NamespaceNet}, "")
	if err != nil {
		t.Fatalf("pin: %v", err)
	}
	t.Cleanup(func() {
		if err := UnpinNamespaces(ns); err != nil {
			t.Errorf("unpin: %v", err)
		}
	})
	return ns
}

// inNamespace runs fn on a locked thread moved into the namespace pinned at
// path. The thread is never unlocked, so it dies with the goroutine.
func inNamespace(t *testing.T, path string, nstype int, fn func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		errc <- osthread.Throwaway(func() error {
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), nstype); err != nil {
				return fmt.Errorf("setns %s: %w", path, err)
			}
			return fn()
		})
	}()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("no answer from a thread in namespace %s after 10s", path)
		return nil
	}
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, m := range mounts {
		found = append(found, m.Mountpoint)
	}
	return found
}
