package network

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// setupPod pins a netns and attaches it; cleanup tears both down.
func setupPod(t *testing.T, c *CNI, id string, ports ...PortMapping) (PodNetwork, Namespaces, Result) {
	t.Helper()
	ns := pinNetNS(t)
	pn := PodNetwork{ID: id, Name: "pod-" + id, Namespace: "default", UID: "uid-" + id, NetNS: ns.Net, PortMappings: ports}
	res, err := c.Setup(testContext(t), pn)
	if err != nil {
		t.Fatalf("Setup %s: %v", id, err)
	}
	// Registered after pinNetNS's cleanup, so it runs first: DEL while the
	// namespace is still there, as the server does.
	t.Cleanup(func() {
		if err := c.Teardown(context.Background(), pn); err != nil {
			t.Errorf("cleanup Teardown %s: %v", id, err)
		}
	})
	return pn, ns, res
}

func TestReady(t *testing.T) {
	n := newTestNetwork(t)
	c := n.newCNI()

	err := c.Ready()
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), n.confDir) {
		t.Fatalf("Ready with no config = %v, want ErrNotReady naming %s", err, n.confDir)
	}

	n.writeConf(t, "10-net.conflist", n.conflist())
	if err := c.Ready(); err != nil {
		t.Fatalf("Ready after a config was added: %v", err)
	}

	n.writeConf(t, "05-broken.conflist", `{"cniVersion": "1.0.0", "name": `)
	if err := c.Ready(); !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "05-broken.conflist") {
		t.Fatalf("Ready with a broken first file = %v, want ErrNotReady naming 05-broken.conflist", err)
	}

	if err := os.Remove(filepath.Join(n.confDir, "05-broken.conflist")); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(); err != nil {
		t.Fatalf("Ready after the broken file went: %v", err)
	}
}

func TestLoadNetwork(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   map[string]string
		wantErr string // "" for a valid network
		want    string // network name, or plugin types joined by ","
	}{
		{"no directory", nil, "no network config", ""},
		{"conflist", map[string]string{"10-a.conflist": `{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge"},{"type":"portmap"}]}`}, "", "a:bridge,portmap"},
		{"single plugin conf", map[string]string{"10-b.conf": `{"cniVersion":"0.4.0","name":"b","type":"bridge"}`}, "", "b:bridge"},
		{"list in a .json", map[string]string{"10-c.json": `{"cniVersion":"1.0.0","name":"c","plugins":[{"type":"ptp"}]}`}, "", "c:ptp"},
		{"lexical order wins", map[string]string{"20-z.conflist": `{"cniVersion":"1.0.0","name":"z","plugins":[{"type":"ptp"}]}`, "10-y.conf": `{"cniVersion":"1.0.0","name":"y","type":"bridge"}`}, "", "y:bridge"},
		{"other extensions ignored", map[string]string{"00-x.txt": `nonsense`, "10-a.conflist": `{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge"}]}`}, "", "a:bridge"},
		{"broken first file", map[string]string{"00-x.conf": `{`, "10-a.conflist": `{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge"}]}`}, "00-x.conf", ""},
		{"no plugins", map[string]string{"10-a.conflist": `{"cniVersion":"1.0.0","name":"a","plugins":[]}`}, "no plugins", ""},
		{"no type", map[string]string{"10-a.conf": `{"cniVersion":"1.0.0","name":"a"}`}, "type", ""},
		{"no version", map[string]string{"10-a.conflist": `{"name":"a","plugins":[{"type":"bridge"}]}`}, "cniVersion", ""},
		{"bad name", map[string]string{"10-a.conflist": `{"cniVersion":"1.0.0","name":"a/b","plugins":[{"type":"bridge"}]}`}, "network name", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "net.d")
			if tc.files != nil {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for name, content := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			l := loadNetwork(dir)
			if tc.wantErr != "" {
				if !errors.Is(l.err, ErrNotReady) || !strings.Contains(l.err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrNotReady mentioning %q", l.err, tc.wantErr)
				}
				return
			}
			if l.err != nil {
				t.Fatalf("err = %v", l.err)
			}
			var types []string
			for _, p := range l.list.Plugins {
				types = append(types, p.Network.Type)
			}
			if got := l.list.Name + ":" + strings.Join(types, ","); got != tc.want {
				t.Errorf("network = %s, want %s", got, tc.want)
			}
		})
	}
}

// The config is not read again while nothing changed, and is when it does.
func TestReadyCachesConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name string) {
		content := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge"}]}`, name)
		if err := os.WriteFile(filepath.Join(dir, "10-net.conflist"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("first")
	c := NewCNI(dir, nil, t.TempDir(), nil)
	list, err := c.network()
	if err != nil || list.Name != "first" {
		t.Fatalf("network = %v, %v; want first", list, err)
	}

	later := time.Now().Add(time.Hour) // past the racy window
	if !c.loaded.unchanged(dir, later) {
		t.Errorf("untouched config reported as changed")
	}
	if c.loaded.unchanged(dir, time.Now()) {
		t.Errorf("a config written just now must not be trusted as unchanged (racy stamp)")
	}

	write("second")
	if c.loaded.unchanged(dir, later) {
		t.Errorf("rewritten config reported as unchanged")
	}
	if list, err := c.network(); err != nil || list.Name != "second" {
		t.Fatalf("after rewrite network = %v, %v; want second", list, err)
	}
}

func TestSetupConnectsPodsAndTeardownReleases(t *testing.T) {
	n := newTestNetwork(t)
	n.writeConf(t, "10-net.conflist", n.conflist(portmapPlugin, `{"type": "loopback"}`))
	c := n.newCNI()

	pnA, nsA, resA := setupPod(t, c, "pod-a")
	pnB, nsB, resB := setupPod(t, c, "pod-b")
	for _, r := range []Result{resA, resB} {
		if len(r.IPs) != 1 || !n.subnet.Contains(r.IPs[0]) || r.Interface != PodInterface {
			t.Fatalf("Setup result %+v, want one IP in %s on %s", r, n.subnet, PodInterface)
		}
	}
	if resA.IPs[0].Equal(resB.IPs[0]) {
		t.Fatalf("both pods got %s", resA.IPs[0])
	}
	if got := n.reservedIPs(t); len(got) != 2 {
		t.Fatalf("host-local reserved %v, want 2 addresses", got)
	}
	if ids, _ := c.AttachedPods(); !slices.Equal(sortedCopy(ids), []string{"pod-a", "pod-b"}) {
		t.Errorf("AttachedPods = %v, want [pod-a pod-b]", ids)
	}

	assertTCP(t, nsA.Net, nsB.Net, resA.IPs[0])

	ctx := testContext(t)
	for i := range 2 {
		if err := c.Teardown(ctx, pnA); err != nil {
			t.Fatalf("Teardown #%d of pod-a: %v", i+1, err)
		}
	}
	if err := UnpinNamespaces(nsB); err != nil {
		t.Fatal(err)
	}
	if err := c.Teardown(ctx, pnB); err != nil {
		t.Fatalf("Teardown of pod-b after its namespace was unpinned: %v", err)
	}
	if got := n.reservedIPs(t); len(got) != 0 {
		t.Errorf("host-local still holds %v after teardown", got)
	}
	if ids, _ := c.AttachedPods(); len(ids) != 0 {
		t.Errorf("AttachedPods after teardown = %v", ids)
	}
	if err := UnpinNamespaces(nsA); err != nil {
		t.Fatal(err)
	}
	waitNoBridgePorts(t, n)
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// waitNoBridgePorts waits for the veths of dead namespaces to go: the
// kernel removes them asynchronously when the namespace is freed.
func waitNoBridgePorts(t *testing.T, n *testNetwork) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(n.bridgePorts(t)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("veths %v still on bridge %s 10s after their namespaces were unpinned", n.bridgePorts(t), n.bridge)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// assertTCP listens in one pod and dials it from the other.
func assertTCP(t *testing.T, serverNS, clientNS string, serverIP net.IP) {
	t.Helper()
	var ln net.Listener
	if err := inNamespace(t, serverNS, unix.CLONE_NEWNET, func() (err error) {
		ln, err = net.Listen("tcp", ":8080")
		return err
	}); err != nil {
		t.Fatalf("listen in pod: %v", err)
	}
	defer ln.Close()
	go serveHello(ln)

	var conn net.Conn
	addr := net.JoinHostPort(serverIP.String(), "8080")
	if err := inNamespace(t, clientNS, unix.CLONE_NEWNET, func() (err error) {
		conn, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}); err != nil {
		t.Fatalf("dial %s from the other pod: %v", addr, err)
	}
	expectHello(t, conn)
}

func serveHello(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = conn.Write([]byte("hello"))
		_ = conn.Close()
	}
}

func expectHello(t *testing.T, conn net.Conn) {
	t.Helper()
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(conn)
	if err != nil || string(got) != "hello" {
		t.Fatalf("read from pod = %q, %v; want hello", got, err)
	}
}

// After a restart (a new CNI on the same cache dir) Teardown still releases
// the address, with the config Setup used even though the directory changed.
func TestTeardownAfterRestart(t *testing.T) {
	n := newTestNetwork(t)
	n.writeConf(t, "10-net.conflist", n.conflist())
	pn, _, res := setupPod(t, n.newCNI(), "pod-r")

	if err := os.Remove(filepath.Join(n.confDir, "10-net.conflist")); err != nil {
		t.Fatal(err)
	}
	restarted := n.newCNI()
	if err := restarted.Ready(); err == nil {
		t.Fatalf("Ready with an empty config dir = nil")
	}
	if ids, _ := restarted.AttachedPods(); !slices.Equal(ids, []string{"pod-r"}) {
		t.Errorf("AttachedPods after restart = %v, want [pod-r]", ids)
	}
	if err := restarted.Teardown(testContext(t), pn); err != nil {
		t.Fatalf("Teardown after restart: %v", err)
	}
	if got := n.reservedIPs(t); slices.Contains(got, res.IPs[0].String()) {
		t.Errorf("host-local still holds %s after teardown", res.IPs[0])
	}
	if ports := n.bridgePorts(t); len(ports) != 0 {
		t.Errorf("veths %v left on the bridge though the namespace is alive", ports)
	}
}

// A failed Setup leaves no address, no veth and no record, whether it fails
// before any plugin runs or halfway through the chain.
func TestFailedSetupLeavesNothing(t *testing.T) {
	n := newTestNetwork(t)
	for _, tc := range []struct {
		name        string
		more        string
		wantNoReady bool
	}{
		{"missing plugin", `{"type": "no-such-plugin"}`, true},
		{"plugin failing after bridge", `{"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.no_such_knob": "1"}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n.writeConf(t, "10-net.conflist", n.conflist(tc.more))
			c := n.newCNI()
			ns := pinNetNS(t)
			pn := PodNetwork{ID: "pod-f", Name: "f", Namespace: "default", UID: "u", NetNS: ns.Net}
			_, err := c.Setup(testContext(t), pn)
			if err == nil {
				_ = c.Teardown(context.Background(), pn)
				t.Fatalf("Setup succeeded")
			}
			if got := errors.Is(err, ErrNotReady); got != tc.wantNoReady {
				t.Errorf("Setup error %v: errors.Is(ErrNotReady) = %v, want %v", err, got, tc.wantNoReady)
			}
			if got := n.reservedIPs(t); len(got) != 0 {
				t.Errorf("failed Setup left reserved addresses %v", got)
			}
			if ports := n.bridgePorts(t); len(ports) != 0 {
				t.Errorf("failed Setup left veths %v", ports)
			}
			if ids, _ := c.AttachedPods(); len(ids) != 0 {
				t.Errorf("failed Setup left attachment records %v", ids)
			}
			if results, _ := os.ReadDir(filepath.Join(n.cacheDir, "results")); len(results) != 0 {
				t.Errorf("failed Setup left libcni cache entries %v", results)
			}
		})
	}
}

// A daemon killed in the middle of ADD leaves a record but no libcni cache;
// Teardown (or the next Setup of the same ID) still releases the address.
func TestTeardownAfterInterruptedSetup(t *testing.T) {
	n := newTestNetwork(t)
	n.writeConf(t, "10-net.conflist", n.conflist())
	c := n.newCNI()
	ns := pinNetNS(t)
	pn := PodNetwork{ID: "pod-i", Name: "i", Namespace: "default", UID: "u", NetNS: ns.Net}
	if _, err := c.Setup(testContext(t), pn); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	// What a crash before libcni wrote its cache looks like.
	if err := os.RemoveAll(filepath.Join(n.cacheDir, "results")); err != nil {
		t.Fatal(err)
	}
	if got := n.reservedIPs(t); len(got) != 1 {
		t.Fatalf("reserved %v, want 1 address", got)
	}

	res, err := c.Setup(testContext(t), pn)
	if err != nil {
		t.Fatalf("Setup again of the same pod: %v", err)
	}
	if got := n.reservedIPs(t); len(got) != 1 || got[0] != res.IPs[0].String() {
		t.Errorf("after a second Setup host-local holds %v, want only %s", got, res.IPs[0])
	}
	if err := c.Teardown(testContext(t), pn); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	if got := n.reservedIPs(t); len(got) != 0 {
		t.Errorf("host-local still holds %v", got)
	}
}

func TestPortMappingReachesPod(t *testing.T) {
	n := newTestNetwork(t)
	if _, err := os.Stat("/usr/lib/cni/portmap"); err != nil {
		t.Skip("no portmap plugin")
	}
	n.writeConf(t, "10-net.conflist", n.conflist(portmapPlugin))
	c := n.newCNI()
	hostPort := freeHostPort(t)
	_, ns, res := setupPod(t, c, "pod-p", PortMapping{Protocol: "TCP", ContainerPort: 8080, HostPort: hostPort})

	var ln net.Listener
	if err := inNamespace(t, ns.Net, unix.CLONE_NEWNET, func() (err error) {
		ln, err = net.Listen("tcp", ":8080")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go serveHello(ln)

	addr := fmt.Sprintf("127.0.0.1:%d", hostPort)
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s (mapped to %s:8080): %v", addr, res.IPs[0], err)
	}
	expectHello(t, conn)
}

func freeHostPort(t *testing.T) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

func TestSetupRefusesBadArguments(t *testing.T) {
	dir := t.TempDir()
	conf := `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"no-such-plugin"}]}`
	if err := os.WriteFile(filepath.Join(dir, "10.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	c := NewCNI(dir, []string{t.TempDir()}, t.TempDir(), nil)
	good := PodNetwork{ID: "p1", Name: "n", Namespace: "ns", UID: "u", NetNS: "/nonexistent"}
	for _, tc := range []struct {
		name    string
		change  func(*PodNetwork)
		wantErr string
	}{
		{"empty ID", func(pn *PodNetwork) { pn.ID = "" }, "pod ID"},
		{"ID with a slash", func(pn *PodNetwork) { pn.ID = "../x" }, "pod ID"},
		{"semicolon in name", func(pn *PodNetwork) { pn.Name = "a;b=c" }, "name"},
		{"no netns", func(pn *PodNetwork) { pn.NetNS = "" }, "no network namespace"},
		{"bad protocol", func(pn *PodNetwork) {
			pn.PortMappings = []PortMapping{{Protocol: "icmp", ContainerPort: 1, HostPort: 2}}
		}, "protocol"},
		{"port out of range", func(pn *PodNetwork) { pn.PortMappings = []PortMapping{{ContainerPort: 70000, HostPort: 2}} }, "out of range"},
		{"bad host IP", func(pn *PodNetwork) { pn.PortMappings = []PortMapping{{ContainerPort: 1, HostPort: 2, HostIP: "x"}} }, "host IP"},
		{"missing plugin", func(pn *PodNetwork) {}, "no-such-plugin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pn := good
			tc.change(&pn)
			_, err := c.Setup(context.Background(), pn)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Setup error = %v, want one mentioning %q", err, tc.wantErr)
			}
			if ids, _ := c.AttachedPods(); len(ids) != 0 {
				t.Errorf("refused Setup left records %v", ids)
			}
		})
	}
}

func TestTeardownOfUnknownPodIsNoop(t *testing.T) {
	c := NewCNI(t.TempDir(), nil, t.TempDir(), nil)
	if err := c.Teardown(context.Background(), PodNetwork{ID: "never-set-up"}); err != nil {
		t.Errorf("Teardown of a pod never set up: %v", err)
	}
}

func TestCapabilityArgs(t *testing.T) {
	pn := PodNetwork{
		PortMappings: []PortMapping{
			{Protocol: "UDP", ContainerPort: 53, HostPort: 5353, HostIP: "127.0.0.1"},
			{ContainerPort: 80}, // no host port: not mapped
		},
		Bandwidth:    &Bandwidth{IngressRate: 1000, EgressRate: 2000},
		CgroupParent: "/kubepods/pod1",
	}
	args := pn.capabilityArgs()
	ports, _ := args["portMappings"].([]portMapEntry)
	if want := []portMapEntry{{5353, 53, "udp", "127.0.0.1"}}; !slices.Equal(ports, want) {
		t.Errorf("portMappings = %+v, want %+v", ports, want)
	}
	if bw, _ := args["bandwidth"].(bandwidthEntry); bw.IngressRate != 1000 || bw.EgressRate != 2000 {
		t.Errorf("bandwidth = %+v", args["bandwidth"])
	}
	if args["cgroupPath"] != "/kubepods/pod1" {
		t.Errorf("cgroupPath = %v", args["cgroupPath"])
	}
	if len(PodNetwork{}.capabilityArgs()) != 0 {
		t.Errorf("a pod without ports, bandwidth or cgroup passes capabilities")
	}
}

// The shipped example must load and name the plugins docs/networking.md
// describes.
func TestContribConflistLoads(t *testing.T) {
	data, err := os.ReadFile("../contrib/cni/10-minicri-bridge.conflist")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "10-minicri-bridge.conflist"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	l := loadNetwork(dir)
	if l.err != nil {
		t.Fatalf("contrib conflist: %v", l.err)
	}
	var types []string
	for _, p := range l.list.Plugins {
		types = append(types, p.Network.Type)
	}
	// Debian 11's plugins speak no version after 0.4.0.
	if want := []string{"0.4.0", "1.0.0"}; !slices.Equal(l.versions, want) {
		t.Errorf("declared CNI versions = %v, want %v", l.versions, want)
	}
	if want := []string{"bridge", "portmap", "loopback"}; !slices.Equal(types, want) {
		t.Errorf("plugins = %v, want %v", types, want)
	}
	if !strings.Contains(string(l.list.Plugins[0].Bytes), `"minicri0"`) || !strings.Contains(string(l.list.Plugins[0].Bytes), `"10.87.0.0/16"`) {
		t.Errorf("bridge plugin is not minicri0 on 10.87.0.0/16: %s", l.list.Plugins[0].Bytes)
	}
}

// A record that cannot be read must not block a pod's removal forever.
func TestTeardownDropsUnreadableRecord(t *testing.T) {
	cacheDir := t.TempDir()
	c := NewCNI(t.TempDir(), nil, cacheDir, nil)
	path := filepath.Join(cacheDir, "attachments", "pod-x.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Teardown(context.Background(), PodNetwork{ID: "pod-x"}); err != nil {
		t.Fatalf("Teardown with an unreadable record: %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("unreadable record still there (err %v)", err)
	}
}

// A plugin removed after Setup must not block Teardown forever: it is skipped
// and the others still release what they hold.
func TestTeardownSkipsRemovedPlugin(t *testing.T) {
	n := newTestNetwork(t)
	n.writeConf(t, "10-net.conflist", n.conflist(`{"type": "tuning"}`))
	pn, _, _ := setupPod(t, n.newCNI(), "pod-m")

	binDir := t.TempDir() // bridge and its IPAM, but no tuning any more
	for _, plugin := range []string{"bridge", "host-local"} {
		if err := os.Symlink(filepath.Join("/usr/lib/cni", plugin), filepath.Join(binDir, plugin)); err != nil {
			t.Fatal(err)
		}
	}
	c := NewCNI(n.confDir, []string{binDir}, n.cacheDir, nil)
	if err := c.Teardown(testContext(t), pn); err != nil {
		t.Fatalf("Teardown with tuning gone: %v", err)
	}
	if got := n.reservedIPs(t); len(got) != 0 {
		t.Errorf("host-local still holds %v", got)
	}
	if ports := n.bridgePorts(t); len(ports) != 0 {
		t.Errorf("veths %v left on the bridge", ports)
	}
}
