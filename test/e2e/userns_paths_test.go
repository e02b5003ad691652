//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A user-namespaced pod starts, its infra process too, with minicri's
// binaries under a directory its mapped root cannot search, as a checkout
// under /root (0700) or a mktemp dir is: the infra process is exec'd from
// the daemon's sealed copy, not by its path.
func TestUserNamespacePodFromPrivateBinaryDir(t *testing.T) {
	requireCurrentRunc(t)
	private := t.TempDir() // 0700, as /root
	bin := filepath.Join(private, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"minicri-conmon", "minicri-pause"} {
		copyFile(t, filepath.Join(binDir, name), filepath.Join(bin, name), 0o755)
	}
	d := StartDaemon(t, WithConfig(fmt.Sprintf("[runtime]\nmonitor_path = %q\n", filepath.Join(bin, "minicri-conmon"))))
	searchable(t, d.Dir)
	d.bridgeNetwork(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	cfg := d.usernsPodConfig("private-bin")
	cfg.Linux.SecurityContext.NamespaceOptions.Pid = runtime.NamespaceMode_POD
	podID := d.runPodOn(t, cfg, usernsHandler)
	ctr := containerConfig("ps", ref, "sh", "-c", "cat /proc/1/cmdline | tr '\\0' ' '")
	ctr.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
		NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_POD, UsernsOptions: usernsOptions()},
	}}
	st, out := d.runToExit(t, podID, cfg, ctr)
	if st.GetExitCode() != 0 || !strings.Contains(out, "minicri-pause pause") {
		t.Fatalf("exit %d, output %q: want PID 1 the pod's infra process", st.GetExitCode(), out)
	}
}

// A container with CAP_SYS_PTRACE in a PID-sharing pod holds /proc/1/exe,
// the infra process's executable: it is the daemon's sealed in-memory
// copy, which it cannot write, and not the host's minicri-pause. In the
// host's user namespace and in a pod's own.
func TestInfraExecutableIsASealedCopy(t *testing.T) {
	hostPause := filepath.Join(binDir, "minicri-pause")
	before, err := os.ReadFile(hostPause)
	if err != nil {
		t.Fatal(err)
	}
	for _, userns := range []bool{false, true} {
		t.Run(map[bool]string{false: "host-users", true: "userns"}[userns], func(t *testing.T) {
			var d *Daemon
			var ref, handler string
			nsOpts := &runtime.NamespaceOption{Pid: runtime.NamespaceMode_POD}
			if userns {
				d, ref = startUsernsDaemon(t)
				handler = usernsHandler
				nsOpts.UsernsOptions = usernsOptions()
			} else {
				d = StartDaemon(t)
				ref = busyboxRef(t)
				d.pull(t, ref)
				nsOpts.Network = runtime.NamespaceMode_NODE
			}
			podCfg := d.podConfig("sealed-exe")
			podCfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: nsOpts}
			pod := d.runPodOn(t, podCfg, handler)
			ctr := containerConfig("attacker", ref, "sh", "-c",
				`echo "exe=$(readlink /proc/1/exe)"; printf 'owned' >>/proc/1/exe; echo "write-exit=$?"; echo "size=$(wc -c </proc/1/exe)"`)
			ctr.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
				Capabilities:     &runtime.Capability{AddCapabilities: []string{"SYS_PTRACE"}},
				NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_POD, UsernsOptions: nsOpts.UsernsOptions},
			}}
			_, out := d.runToExit(t, pod, podCfg, ctr)
			t.Logf("the attacker's output:\n%s", out)
			if !strings.Contains(out, "exe=/memfd:minicri-pause (deleted)\n") {
				t.Errorf("/proc/1/exe is not the sealed copy")
			}
			if !strings.Contains(out, fmt.Sprintf("size=%d\n", len(before))) {
				t.Errorf("the container could not read /proc/1/exe, or it is not minicri-pause (%d bytes): the test proves nothing", len(before))
			}
			if strings.Contains(out, "write-exit=0\n") {
				t.Errorf("the container wrote the infra process's executable")
			}
			if after, err := os.ReadFile(hostPause); err != nil || !bytes.Equal(after, before) {
				t.Errorf("the host's %s changed (%v)", hostPause, err)
			}
		})
	}
}

// A pod whose host uid or gid range overlaps a ready pod's is refused with
// InvalidArgument naming the field: the two would be one
// user to the node. Once the first pod is stopped, the range is free again.
func TestUserNamespaceOverlapRefused(t *testing.T) {
	d, _ := startUsernsDaemon(t)
	first := d.usernsPodConfig("first")
	firstID := d.runPodOn(t, first, usernsHandler)
	const field = "config.linux.security_context.namespace_options.userns_options"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	overlapping := func(name string, uidShift, gidShift uint32) *runtime.PodSandboxConfig {
		cfg := d.usernsPodConfig(name)
		u := cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions
		u.Uids[0].HostId += uidShift
		u.Gids[0].HostId += gidShift
		return cfg
	}
	for _, c := range []struct {
		name      string
		cfg       *runtime.PodSandboxConfig
		wantField string
	}{
		{"uids", overlapping("uids", 65535, 1<<20), field + ".uids"},
		{"gids", overlapping("gids", 1<<20, 65535), field + ".gids"},
	} {
		id, err := d.Runtime.RunPodSandbox(ctx, c.cfg, usernsHandler)
		if err == nil {
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_ = d.Runtime.StopPodSandbox(ctx, id)
				_ = d.Runtime.RemovePodSandbox(ctx, id)
			})
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.wantField+":") || !strings.Contains(err.Error(), firstID) {
			t.Errorf("RunPodSandbox overlapping the %s = %v; want InvalidArgument naming %s and pod %s", c.name, err, c.wantField, firstID)
		}
	}
	if err := d.Runtime.StopPodSandbox(ctx, firstID); err != nil {
		t.Fatal(err)
	}
	d.runPodOn(t, overlapping("after-stop", 65535, 65535), usernsHandler)
}

// Pods whose roots map onto host users, nobody (65534) and uid 1, as any
// CRI client may ask (there is no floor on host IDs: cri-tools maps
// container 0 to host 1000), run; and neither host user enters any
// directory of the state root, the run dir or the rootfs stage, nor reads
// what the pods wrote: the rootfs's upper dir, /etc/hosts, the logs. Their
// runtimes found the rootfses on a stage of their own, not through the
// state root, for a pod's first container and for one that joined its
// monitor.
func TestHostUsersMappedIntoPodsReachNothing(t *testing.T) {
	d, ref := startUsernsDaemon(t)
	type pod struct {
		name     string
		hostRoot uint32
		secret   string // the file its container wrote, in the rootfs's upper dir
		files    []string
	}
	pods := []*pod{{name: "nobody", hostRoot: nobodyUID}, {name: "uid1", hostRoot: 1}}
	for i, p := range pods {
		// The pod's root is the host user; its other IDs are far from any.
		maps := func() []*runtime.IDMapping {
			return []*runtime.IDMapping{
				{ContainerId: 0, HostId: p.hostRoot, Length: 1},
				{ContainerId: 1, HostId: usernsHostID + uint32(i)*65536, Length: 65535},
			}
		}
		u := &runtime.UserNamespace{Mode: runtime.NamespaceMode_POD, Uids: maps(), Gids: maps()}
		cfg := d.usernsPodConfig(p.name)
		cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions = u
		podID := d.runPodOn(t, cfg, usernsHandler)
		ctr := containerConfig("writer", ref, "sh", "-c", "echo secret-$0 > /tmp/secret; echo logged-$0; id -u; exec sleep 600", p.name)
		ctr.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
			NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_CONTAINER, UsernsOptions: u},
		}}
		ctrID := d.startContainer(t, podID, cfg, ctr)
		// A second container joins the pod's shared monitor, whose join
		// helper runs the runtime's create on the stage too.
		joiner := containerConfig("joiner", ref, "sh", "-c", "echo joined > /tmp/joined; exec sleep 600")
		joiner.Linux = ctr.Linux
		joinerID := d.startContainer(t, podID, cfg, joiner)
		p.secret = filepath.Join(d.rootfsDir(ctrID), "upper", "tmp", "secret")
		joined := filepath.Join(d.rootfsDir(joinerID), "upper", "tmp", "joined")
		waitFor(t, p.name+"'s second container to write its file", 30*time.Second, func() bool {
			_, err := os.Stat(joined)
			return err == nil
		})
		waitFor(t, p.name+"'s container to write its file", 30*time.Second, func() bool {
			b, err := os.ReadFile(p.secret)
			return err == nil && string(b) == "secret-"+p.name+"\n"
		})
		var st syscall.Stat_t
		if err := syscall.Stat(p.secret, &st); err != nil || st.Uid != p.hostRoot {
			t.Fatalf("%s is owned by %d (%v), want the pod's root, host uid %d: the test proves nothing", p.secret, st.Uid, err, p.hostRoot)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ctrSt, err := d.Runtime.ContainerStatus(ctx, ctrID, false)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		p.files = []string{p.secret, filepath.Join(d.RunDir, "pods", podID, "hosts"), ctrSt.GetStatus().GetLogPath()}
	}
	paths := allPaths(t, d.Root, d.RunDir, d.RunDir+"-rootfs")
	for _, p := range pods {
		if got := probeAs(t, int(p.hostRoot), paths); len(got) != 0 {
			t.Errorf("host uid %d (the root of pod %s) could (%d):\n%s", p.hostRoot, p.name, len(got), strings.Join(got, "\n"))
		}
		for _, q := range pods {
			for _, f := range q.files {
				if out, ok := asUID(t, int(p.hostRoot), "", "/bin/busybox", "cat", f); ok {
					t.Errorf("host uid %d (the root of pod %s) read %s: %q", p.hostRoot, p.name, f, out)
				}
			}
		}
	}
}

// cri-tools' user-namespace spec (critest, "runtime should support
// NamespaceMode_POD") maps container 0 to host 1000 with 100000 IDs, over
// nobody and the first real users: it runs, with exactly that mapping.
// There is no floor on host IDs.
func TestCRIToolsUserNamespaceMappingRuns(t *testing.T) {
	d, ref := startUsernsDaemon(t)
	maps := func() []*runtime.IDMapping {
		return []*runtime.IDMapping{{ContainerId: 0, HostId: 1000, Length: 100000}}
	}
	u := &runtime.UserNamespace{Mode: runtime.NamespaceMode_POD, Uids: maps(), Gids: maps()}
	cfg := d.usernsPodConfig("critest")
	cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions = u
	podID := d.runPodOn(t, cfg, usernsHandler)
	ctr := containerConfig("uidmap", ref, "cat", "/proc/self/uid_map")
	ctr.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
		NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_CONTAINER, UsernsOptions: u},
	}}
	st, out := d.runToExit(t, podID, cfg, ctr)
	if got := strings.Fields(out); st.GetExitCode() != 0 || len(got) != 3 || got[0] != "0" || got[1] != "1000" || got[2] != "100000" {
		t.Fatalf("exit %d, uid_map %q; want 0 1000 100000", st.GetExitCode(), out)
	}
}
