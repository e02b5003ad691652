//go:build e2e

package e2e

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Two containers of one pod share its network and IPC namespaces and a
// directory bind-mounted into both.
func TestPodContainersShareNamespacesAndVolume(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	d.bridgeNetwork(t)
	podCfg := d.podConfig("shared")
	pod := d.runPod(t, podCfg)
	vol := t.TempDir()
	mount := []*runtime.Mount{{ContainerPath: "/shared", HostPath: vol}}

	writer := containerConfig("writer", ref, "sh", "-c", "echo $(readlink /proc/self/ns/net) $(readlink /proc/self/ns/ipc) > /shared/ns; echo from-writer > /shared/msg")
	writer.Mounts = mount
	if st, _ := d.runToExit(t, pod, podCfg, writer); st.GetExitCode() != 0 {
		t.Fatalf("writer exit %d", st.GetExitCode())
	}
	reader := containerConfig("reader", ref, "sh", "-c", "cat /shared/msg; [ \"$(readlink /proc/self/ns/net) $(readlink /proc/self/ns/ipc)\" = \"$(cat /shared/ns)\" ] && echo same-ns")
	reader.Mounts = mount
	st, log := d.runToExit(t, pod, podCfg, reader)
	if st.GetExitCode() != 0 || log != "from-writer\nsame-ns\n" {
		t.Fatalf("reader: exit %d, log %q; want the writer's message and the same namespaces", st.GetExitCode(), log)
	}
}

func TestHostnameAndResolvConf(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	d.bridgeNetwork(t)
	podCfg := d.podConfig("dns")
	podCfg.Hostname = "web-0"
	podCfg.DnsConfig = &runtime.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"e2e.svc.cluster.local"}, Options: []string{"ndots:5"}}
	pod := d.runPod(t, podCfg)

	_, log := d.runToExit(t, pod, podCfg, containerConfig("c", ref, "sh", "-c", "hostname; cat /etc/resolv.conf; grep web-0 /etc/hosts"))
	for _, want := range []string{"web-0\n", "nameserver 10.96.0.10", "search e2e.svc.cluster.local", "options ndots:5"} {
		if !strings.Contains(log, want) {
			t.Errorf("output lacks %q:\n%s", want, log)
		}
	}
	resp, err := d.Runtime.PodSandboxStatus(context.Background(), pod, false)
	if err != nil {
		t.Fatal(err)
	}
	ip := resp.GetStatus().GetNetwork().GetIp()
	if !strings.Contains(log, ip+"\tweb-0") && !strings.Contains(log, ip+" web-0") {
		t.Errorf("/etc/hosts does not map the pod IP %s to its hostname:\n%s", ip, log)
	}
}

// A pod gets an IP on the bridge, and another pod reaches it over TCP.
func TestPodIPAndCrossPodTCP(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	subnet := d.bridgeNetwork(t)
	_, ipnet, _ := net.ParseCIDR(subnet)
	ctx := context.Background()

	serverCfg := d.podConfig("server")
	server := d.runPod(t, serverCfg)
	resp, err := d.Runtime.PodSandboxStatus(ctx, server, false)
	if err != nil {
		t.Fatal(err)
	}
	serverIP := net.ParseIP(resp.GetStatus().GetNetwork().GetIp())
	if serverIP == nil || !ipnet.Contains(serverIP) {
		t.Fatalf("pod IP %q not in the network's subnet %s", resp.GetStatus().GetNetwork().GetIp(), subnet)
	}
	if ns := resp.GetStatus().GetLinux().GetNamespaces().GetOptions(); ns.GetNetwork() != runtime.NamespaceMode_POD {
		t.Errorf("namespace options = %v, want a pod network", ns)
	}
	// busybox nc shuts its sending side as soon as its stdin ends; a
	// listener with /dev/null as stdin would do that on accept, and a client
	// that sees the end before reading its own stdin sends nothing. Under -e
	// the listener's stdin is the connection.
	listener := d.startContainer(t, server, serverCfg, containerConfig("listen", ref, "sh", "-c", "nc -l -p 8080 -e sh -c 'cat > /tmp/got'; cat /tmp/got"))

	clientCfg := d.podConfig("client")
	client := d.runPod(t, clientCfg)
	dial := containerConfig("dial", ref, "sh", "-c", "for i in $(seq 50); do echo hello-over-tcp | nc "+serverIP.String()+" 8080 && exit 0; sleep 0.1; done; exit 1")
	if st, log := d.runToExit(t, client, clientCfg, dial); st.GetExitCode() != 0 {
		t.Fatalf("client could not connect to %s:8080: exit %d, %q", serverIP, st.GetExitCode(), log)
	}
	st := d.waitExited(t, listener, 10*time.Second)
	if log := readLog(t, st.GetLogPath()); log != "hello-over-tcp\n" {
		t.Errorf("server received %q", log)
	}

	// After the pods are gone, their IPs are released.
	ipam := filepath.Join(d.Dir, "ipam")
	for _, id := range []string{client, server} {
		if err := d.Runtime.StopPodSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if ips := reservedIPs(ipam); len(ips) != 0 {
		t.Errorf("IPs %v still reserved in %s after the pods stopped", ips, ipam)
	}
	// A second stop is a no-op, and the sandbox reports not ready.
	if err := d.Runtime.StopPodSandbox(ctx, server); err != nil {
		t.Errorf("second stop: %v", err)
	}
	resp, err = d.Runtime.PodSandboxStatus(ctx, server, false)
	if err != nil || resp.GetStatus().GetState() != runtime.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("status after stop = %v, %v", resp.GetStatus().GetState(), err)
	}
}

func TestListFilters(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	ctx := context.Background()
	hostNet := &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE}}
	a := d.podConfig("a")
	a.Labels = map[string]string{"app": "a"}
	a.Linux.SecurityContext = hostNet
	b := d.podConfig("b")
	b.Labels = map[string]string{"app": "b"}
	b.Linux.SecurityContext = hostNet
	podA, podB := d.runPod(t, a), d.runPod(t, b)
	ca := containerConfig("ca", ref, "sleep", "30")
	ca.Labels = map[string]string{"tier": "x"}
	idA := d.startContainer(t, podA, a, ca)
	d.createContainer(t, podB, b, containerConfig("cb", ref, "true"))

	pods, err := d.Runtime.ListPodSandbox(ctx, &runtime.PodSandboxFilter{LabelSelector: map[string]string{"app": "b"}})
	if err != nil || len(pods) != 1 || pods[0].GetId() != podB {
		t.Errorf("pods with app=b: %v, %v", pods, err)
	}
	pods, _ = d.Runtime.ListPodSandbox(ctx, &runtime.PodSandboxFilter{Id: podA[:12]})
	if len(pods) != 1 || pods[0].GetId() != podA {
		t.Errorf("pods by ID prefix: %v", pods)
	}
	running, _ := d.Runtime.ListContainers(ctx, &runtime.ContainerFilter{State: &runtime.ContainerStateValue{State: runtime.ContainerState_CONTAINER_RUNNING}})
	if len(running) != 1 || running[0].GetId() != idA {
		t.Errorf("running containers: %v", running)
	}
	inB, _ := d.Runtime.ListContainers(ctx, &runtime.ContainerFilter{PodSandboxId: podB})
	if len(inB) != 1 || inB[0].GetState() != runtime.ContainerState_CONTAINER_CREATED {
		t.Errorf("containers of pod b: %v", inB)
	}
	byLabel, _ := d.Runtime.ListContainers(ctx, &runtime.ContainerFilter{LabelSelector: map[string]string{"tier": "x"}})
	if len(byLabel) != 1 || byLabel[0].GetId() != idA {
		t.Errorf("containers with tier=x: %v", byLabel)
	}
	// Removing a sandbox removes its running containers.
	if err := d.Runtime.RemovePodSandbox(ctx, podA); err != nil {
		t.Fatal(err)
	}
	if all, _ := d.Runtime.ListContainers(ctx, nil); len(all) != 1 {
		t.Errorf("containers after removing pod a: %v", all)
	}
}

// A pod that shares its PID namespace (the CRI default) gets an infra
// process as PID 1; its containers see each other's processes. A container
// in CONTAINER mode sees only its own.
func TestSharedPIDNamespace(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("pid")
	podCfg.Linux.SecurityContext.NamespaceOptions.Pid = runtime.NamespaceMode_POD
	pod := d.runPod(t, podCfg)

	sleeper := containerConfig("sleeper", ref, "sleep", "300")
	d.startContainer(t, pod, podCfg, sleeper)
	_, log := d.runToExit(t, pod, podCfg, containerConfig("looker", ref, "ps", "-o", "pid,args"))
	if !strings.Contains(log, "sleep 300") || !strings.Contains(log, "    1 ") || !strings.Contains(log, "minicri-pause pause") {
		t.Errorf("a container of a PID-sharing pod does not see the pod's processes:\n%s", log)
	}
	own := containerConfig("own", ref, "ps", "-o", "pid,args")
	own.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
		NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_CONTAINER}}}
	if _, log := d.runToExit(t, pod, podCfg, own); strings.Contains(log, "sleep 300") {
		t.Errorf("a container with its own PID namespace sees the pod's processes:\n%s", log)
	}
}
