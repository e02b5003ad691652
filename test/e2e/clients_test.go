//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Clients other than the kubelet (crictl, critest, CI tools) send what the
// kubelet never does: IDs that are UUIDs or names, pods without a hostname,
// huge exec output. These tests send it as they do.

// unknownIDs are IDs no object has, of the kinds such clients send.
var unknownIDs = []string{
	"6ba7b810-9dad-11d1-80b4-00c04fd430c8",
	"my-pod",
	"../../etc",
	strings.Repeat("a", 64),
}

func TestStopUnknownUUIDSucceeds(t *testing.T) {
	d := StartDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range unknownIDs {
		if err := d.Runtime.StopPodSandbox(ctx, id); err != nil {
			t.Errorf("StopPodSandbox(%q) = %v, want success", id, err)
		}
		if err := d.Runtime.RemovePodSandbox(ctx, id); err != nil {
			t.Errorf("RemovePodSandbox(%q) = %v, want success", id, err)
		}
		if err := d.Runtime.StopContainer(ctx, id, 1); err != nil {
			t.Errorf("StopContainer(%q) = %v, want success", id, err)
		}
		if err := d.Runtime.RemoveContainer(ctx, id); err != nil {
			t.Errorf("RemoveContainer(%q) = %v, want success", id, err)
		}
	}
}

func TestUnknownUUIDIsNotFound(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("known")
	pod := d.runPod(t, podCfg)
	d.startContainer(t, pod, podCfg, containerConfig("known", ref, "sleep", "60"))
	before := d.stateFiles(t)
	rt, _ := d.rawClients(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range append(unknownIDs, strings.Repeat("n", 1<<20)) {
		calls := map[string]func() error{
			"PodSandboxStatus": func() error {
				_, err := rt.PodSandboxStatus(ctx, &runtime.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
				return err
			},
			"PodSandboxStats": func() error {
				_, err := rt.PodSandboxStats(ctx, &runtime.PodSandboxStatsRequest{PodSandboxId: id})
				return err
			},
			"PortForward": func() error {
				_, err := rt.PortForward(ctx, &runtime.PortForwardRequest{PodSandboxId: id, Port: []int32{80}})
				return err
			},
			"CreateContainer": func() error {
				_, err := rt.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: id, Config: containerConfig("c", ref, "true"), SandboxConfig: podCfg})
				return err
			},
			"StartContainer": func() error {
				_, err := rt.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: id})
				return err
			},
			"ContainerStatus": func() error {
				_, err := rt.ContainerStatus(ctx, &runtime.ContainerStatusRequest{ContainerId: id, Verbose: true})
				return err
			},
			"ContainerStats": func() error {
				_, err := rt.ContainerStats(ctx, &runtime.ContainerStatsRequest{ContainerId: id})
				return err
			},
			"UpdateContainerResources": func() error {
				_, err := rt.UpdateContainerResources(ctx, &runtime.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtime.LinuxContainerResources{CpuShares: 512}})
				return err
			},
			"ReopenContainerLog": func() error {
				_, err := rt.ReopenContainerLog(ctx, &runtime.ReopenContainerLogRequest{ContainerId: id})
				return err
			},
			"ExecSync": func() error {
				_, err := rt.ExecSync(ctx, &runtime.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}})
				return err
			},
			"Exec": func() error {
				_, err := rt.Exec(ctx, &runtime.ExecRequest{ContainerId: id, Cmd: []string{"true"}, Stdout: true})
				return err
			},
			"Attach": func() error {
				_, err := rt.Attach(ctx, &runtime.AttachRequest{ContainerId: id, Stdout: true})
				return err
			},
		}
		for name, call := range calls {
			if err := call(); status.Code(err) != codes.NotFound {
				t.Errorf("%s(%.40q) = %.200s, want NotFound", name, id, errorCode(err))
			}
		}
		pods, err := rt.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{Filter: &runtime.PodSandboxFilter{Id: id}})
		if err != nil || len(pods.GetItems()) != 0 {
			t.Errorf("ListPodSandbox(id %.40q) = %d pods, %v; want none", id, len(pods.GetItems()), err)
		}
		ctrs, err := rt.ListContainers(ctx, &runtime.ListContainersRequest{Filter: &runtime.ContainerFilter{PodSandboxId: id}})
		if err != nil || len(ctrs.GetContainers()) != 0 {
			t.Errorf("ListContainers(pod %.40q) = %d containers, %v; want none", id, len(ctrs.GetContainers()), err)
		}
		stats, err := rt.ListContainerStats(ctx, &runtime.ListContainerStatsRequest{Filter: &runtime.ContainerStatsFilter{Id: id}})
		if err != nil || len(stats.GetStats()) != 0 {
			t.Errorf("ListContainerStats(id %.40q) = %d, %v; want none", id, len(stats.GetStats()), err)
		}
	}
	// An empty ID is still malformed.
	if _, err := rt.ContainerStatus(ctx, &runtime.ContainerStatusRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ContainerStatus with no ID = %s, want InvalidArgument", errorCode(err))
	}
	if after := d.stateFiles(t); after != before {
		t.Errorf("calls on unknown IDs changed the state dir:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if resp, err := d.Runtime.ListContainers(ctx, nil); err != nil || len(resp) != 1 {
		t.Errorf("ListContainers = %d, %v; want the one container, untouched", len(resp), err)
	}
}

// TestRunAsGroupWithoutUserIsRefused: a group alone is refused, as containerd
// does ("user group is specified without user"), for a container and for a pod.
func TestRunAsGroupWithoutUserIsRefused(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("group")
	pod := d.runPod(t, podCfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const field = "config.linux.security_context.run_as_group:"

	cc := containerConfig("group", ref, "id")
	cc.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{RunAsGroup: &runtime.Int64Value{Value: 1000}}}
	if _, err := d.Runtime.CreateContainer(ctx, pod, cc, podCfg); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), field) {
		t.Errorf("CreateContainer with run_as_group alone = %v, want InvalidArgument naming %s", err, field)
	}

	bad := d.hostNetworkPod("group-pod")
	bad.Linux.SecurityContext.RunAsGroup = &runtime.Int64Value{Value: 1000}
	if _, err := d.Runtime.RunPodSandbox(ctx, bad, ""); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), field) {
		t.Errorf("RunPodSandbox with run_as_group alone = %v, want InvalidArgument naming %s", err, field)
	}

	// With a user it runs as both.
	cc = containerConfig("group-user", ref, "id")
	cc.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
		RunAsUser: &runtime.Int64Value{Value: 1000}, RunAsGroup: &runtime.Int64Value{Value: 2000}}}
	if st, log := d.runToExit(t, pod, podCfg, cc); st.GetExitCode() != 0 || !strings.HasPrefix(log, "uid=1000") || !strings.Contains(log, " gid=2000 ") {
		t.Errorf("run_as_user 1000, run_as_group 2000: exit %d, id says %q", st.GetExitCode(), log)
	}
}

// TestPodWithoutHostnameAndLongNameStarts: crictl and CI tools send no
// hostname and pod names longer than a host name may be. The pod gets the
// node's hostname, as in containerd, and every place that shows it agrees.
func TestPodWithoutHostnameAndLongNameStarts(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	d.bridgeNetwork(t)
	node, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	podCfg := d.podConfig(strings.Repeat("ci-job-with-a-long-generated-name-", 3)) // 102 bytes
	podCfg.Hostname = ""
	pod := d.runPod(t, podCfg)
	st, log := d.runToExit(t, pod, podCfg, containerConfig("c", ref, "sh", "-c",
		`hostname; cat /etc/hostname; echo "$HOSTNAME"; grep -c "[[:space:]]$(hostname)\($\|[[:space:]]\)" /etc/hosts`))
	if want := strings.Repeat(node+"\n", 3) + "1\n"; st.GetExitCode() != 0 || log != want {
		t.Errorf("hostname, /etc/hostname, HOSTNAME, /etc/hosts lines: exit %d, got %q, want %q", st.GetExitCode(), log, want)
	}

	bad := d.podConfig("too-long")
	bad.Hostname = strings.Repeat("h", 65)
	if _, err := d.Runtime.RunPodSandbox(context.Background(), bad, ""); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "config.hostname:") {
		t.Errorf("RunPodSandbox with a 65-byte hostname = %v, want InvalidArgument naming config.hostname", err)
	}
}

// TestExecSyncOutputOverTheCapFitsTheKubeletsLimit: output over 16 MiB is
// truncated to fit one answer the kubelet's CRI client accepts (16 MiB in
// all), not failed with ResourceExhausted; on one stream and on both, where
// each keeps half whichever wrote first.
func TestExecSyncOutputOverTheCapFitsTheKubeletsLimit(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("bigexec")
	pod := d.runPod(t, podCfg)
	ctr := d.startContainer(t, pod, podCfg, containerConfig("bigexec", ref, "sleep", "300"))
	const total = 16<<20 - 1<<10 // config.ExecSyncOutputLimit
	for _, c := range []struct {
		name           string
		cmd            []string
		stdout, stderr int
		exitCode       int
	}{
		{"stdout", []string{"head", "-c", "17000000", "/dev/zero"}, total, 0, 0},
		{"stderr", []string{"sh", "-c", "head -c 17000000 /dev/zero >&2"}, 0, total, 0},
		{"both", []string{"sh", "-c", "head -c 17000000 /dev/zero; head -c 17000000 /dev/zero >&2; exit 3"}, total / 2, total / 2, 3},
		{"both interleaved", []string{"sh", "-c", "head -c 17000000 /dev/zero >&2 & head -c 17000000 /dev/zero; wait"}, total / 2, total / 2, 0},
		{"small stdout, big stderr", []string{"sh", "-c", "echo ok; head -c 17000000 /dev/zero >&2"}, 3, total - 3, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, err := d.Runtime.ExecSync(context.Background(), ctr, c.cmd, time.Minute)
			var exitErr interface{ ExitStatus() int }
			if err != nil && !(errors.As(err, &exitErr) && exitErr.ExitStatus() == c.exitCode) {
				t.Fatalf("ExecSync %v: %v, want exit code %d", c.cmd, err, c.exitCode)
			}
			if len(stdout) != c.stdout || len(stderr) != c.stderr {
				t.Errorf("ExecSync %v kept %d + %d bytes, want %d + %d", c.cmd, len(stdout), len(stderr), c.stdout, c.stderr)
			}
		})
	}
	waitFor(t, "the truncation logged", 10*time.Second, func() bool {
		return strings.Contains(d.Output(), "exec sync output over runtime.exec_sync_max_output: truncated")
	})
}

// TestUpdateRuntimeConfigWritesCNIConfigFromTemplate: the kubelet sends the
// node's pod CIDR; with cni.conf_template set, the daemon writes the network
// config from it, the network becomes ready, and the next pod gets an IP in
// that CIDR. The CIDR is shown by Status(verbose) and kept across a restart.
func TestUpdateRuntimeConfigWritesCNIConfigFromTemplate(t *testing.T) {
	bridge := "mcbr" + randomHex(4)
	n := func(s string) int { var v int; fmt.Sscanf(s, "%x", &v); return v }
	cidr := fmt.Sprintf("10.%d.%d.0/24", 200+n(randomHex(1))%50, n(randomHex(1)))
	tmplDir, err := os.MkdirTemp("", tmpPrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmplDir) })
	tmpl := filepath.Join(tmplDir, "cni.tmpl")
	ipam := filepath.Join(tmplDir, "ipam")
	template := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "cniVersions": ["0.4.0", "1.0.0"],
  "name": "e2e-tmpl-%s",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "dataDir": %q,
              "ranges": [{{range $i, $r := .PodCIDRRanges}}{{if $i}}, {{end}}[{"subnet": "{{$r}}"}]{{end}}],
              "routes": [{{range $i, $r := .Routes}}{{if $i}}, {{end}}{"dst": "{{$r}}"}{{end}}]}}
  ]
}`, bridge, bridge, ipam)
	if err := os.WriteFile(tmpl, []byte(template), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", bridge).Run()
		if ips := reservedIPs(ipam); len(ips) > 0 {
			t.Errorf("IP addresses still allocated after the pods were removed: %v", ips)
		}
	})
	d := StartDaemon(t, WithArgs("--cni-conf-template", tmpl))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if ready, _ := networkReady(t, d); ready {
		t.Fatalf("NetworkReady before any config was written")
	}
	malformed := &runtime.RuntimeConfig{NetworkConfig: &runtime.NetworkConfig{PodCidr: "10.1.2.3"}}
	if err := d.Runtime.UpdateRuntimeConfig(ctx, malformed); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "runtime_config.network_config.pod_cidr:") {
		t.Errorf("UpdateRuntimeConfig with %q = %v, want InvalidArgument naming runtime_config.network_config.pod_cidr", "10.1.2.3", err)
	}
	if err := d.Runtime.UpdateRuntimeConfig(ctx, &runtime.RuntimeConfig{NetworkConfig: &runtime.NetworkConfig{}}); err != nil {
		t.Errorf("UpdateRuntimeConfig with no CIDR = %v, want a no-op", err)
	}
	if err := d.Runtime.UpdateRuntimeConfig(ctx, &runtime.RuntimeConfig{NetworkConfig: &runtime.NetworkConfig{PodCidr: cidr}}); err != nil {
		t.Fatalf("UpdateRuntimeConfig(%s): %v", cidr, err)
	}
	if ready, info := networkReady(t, d); !ready || info["podCIDR"] != cidr || info["lastCNILoadStatus"] != "OK" {
		t.Errorf("after UpdateRuntimeConfig: NetworkReady %v, info podCIDR %q, lastCNILoadStatus %q; want ready, %s, OK", ready, info["podCIDR"], info["lastCNILoadStatus"], cidr)
	}
	if _, err := os.Stat(filepath.Join(d.Dir, "cni", "10-minicri-net.conflist")); err != nil {
		t.Errorf("config not written where the kubelet's runtimes put it: %v", err)
	}

	podCfg := d.podConfig("from-template")
	pod := d.runPod(t, podCfg)
	resp, err := d.Runtime.PodSandboxStatus(ctx, pod, false)
	if err != nil {
		t.Fatal(err)
	}
	_, ipnet, _ := net.ParseCIDR(cidr)
	if ip := net.ParseIP(resp.GetStatus().GetNetwork().GetIp()); ip == nil || !ipnet.Contains(ip) {
		t.Errorf("pod IP %q is not in the pod CIDR %s", resp.GetStatus().GetNetwork().GetIp(), cidr)
	}

	d.Signal(syscall.SIGTERM)
	d.Wait(20 * time.Second)
	d.Start()
	if _, info := networkReady(t, d); info["podCIDR"] != cidr {
		t.Errorf("after a restart: podCIDR %q, want %s kept", info["podCIDR"], cidr)
	}
}

// networkReady returns the NetworkReady condition and the verbose Status
// info, each value decoded from its JSON.
func networkReady(t *testing.T, d *Daemon) (bool, map[string]any) {
	t.Helper()
	resp, err := d.Runtime.Status(context.Background(), true)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	info := map[string]any{}
	for k, v := range resp.GetInfo() {
		var decoded any
		if err := json.Unmarshal([]byte(v), &decoded); err != nil {
			t.Fatalf("Status info %s is not JSON: %q", k, v)
		}
		info[k] = decoded
	}
	for _, c := range resp.GetStatus().GetConditions() {
		if c.GetType() == runtime.NetworkReady {
			return c.GetStatus(), info
		}
	}
	t.Fatalf("Status has no NetworkReady condition")
	return false, nil
}
