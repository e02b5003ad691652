//go:build e2e && guest

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/remotecommand"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestGuestLifecycle runs a pod and a container with the kubelet's systemd
// slice path as cgroup parent: the container runs in a scope in the pod's
// slice, logs, and once stopped and removed leaves no unit, cgroup, mount
// or process behind (runPod checks the pod's the same way).
func TestGuestLifecycle(t *testing.T) {
	t.Parallel()
	g, d := guestTest(t)
	p := g.runPod(t, d, guestPodConfig("life"))
	id := g.startIn(t, d, p, guestContainer("c", "sh", "-c", "echo hello-from-the-guest; exec sleep 3600"))

	if st := d.status(t, id); st.GetState() != runtime.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container %s, want running", st.GetState())
	}
	scope := "minicri-" + id + ".scope"
	if got := g.systemdProperty(t, scope, "ActiveState"); got != "active" {
		t.Errorf("%s: ActiveState %q, want active", scope, got)
	}
	if got := g.systemdProperty(t, scope, "Slice"); got != p.Slice {
		t.Errorf("%s: in slice %q, want the pod's %s", scope, got, p.Slice)
	}
	pid := g.containerPID(t, p, id)
	if got := strings.TrimSpace(g.Run(t, fmt.Sprintf("cat /proc/%d/comm", pid))); got != "sleep" {
		t.Errorf("the scope's process is %q, want sleep", got)
	}
	logPath := p.Cfg.GetLogDirectory() + "/c.log"
	g.waitFor(t, "the container's log line", g.Timeout(10*time.Second), func() bool {
		out, _ := g.run("cat " + shellQuote(logPath))
		return strings.Contains(parseLog([]byte(out)), "hello-from-the-guest")
	})
	// The kubelet's pod stats go by the pod's cgroup: the whole slice path.
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(30*time.Second))
	defer cancel()
	stats, err := d.Runtime.ListPodSandboxStats(ctx, &runtime.PodSandboxStatsFilter{Id: p.ID})
	if err != nil {
		t.Fatalf("ListPodSandboxStats: %v", err)
	}
	if len(stats) != 1 || stats[0].GetLinux().GetMemory().GetWorkingSetBytes().GetValue() == 0 {
		t.Errorf("ListPodSandboxStats of the pod: %v, want one with memory in use", stats)
	}

	if err := d.Runtime.StopContainer(ctx, id, 10); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	if err := d.Runtime.RemoveContainer(ctx, id); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	// Its monitor exits after it, asynchronously: settled.
	if left := g.settledLeftovers(t, id); left != "" {
		t.Errorf("left behind by the removed container:\n%s", left)
	}
}

// TestGuestExec execs in a container with and without a tty, over the
// streaming server (reached through ssh, as the kubelet would proxy it),
// and by ExecSync.
func TestGuestExec(t *testing.T) {
	t.Parallel()
	g, d := guestTest(t)
	_, id := g.sleeper(t, d, "exec")

	if out, _, code := g.execSync(t, d, id, "sh", "-c", "echo out; exit 3"); code != 3 || out != "out\n" {
		t.Errorf("ExecSync: %q exit %d, want \"out\\n\" exit 3", out, code)
	}
	for _, tty := range []bool{false, true} {
		req := &runtime.ExecRequest{ContainerId: id, Cmd: []string{"sh", "-c", "if [ -t 0 ]; then echo tty; else echo notty; fi; read x; echo got-$x"},
			Stdin: true, Stdout: true, Stderr: !tty, Tty: tty}
		ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(30*time.Second))
		u := g.hostURL(t, d.execURL(t, req))
		var out, errOut lockedBuffer
		opts := remotecommand.StreamOptions{Stdin: strings.NewReader("ping\n"), Stdout: &out, Tty: tty}
		if !tty {
			opts.Stderr = &errOut
		}
		err := executor(t, "websocket", u).StreamWithContext(ctx, opts)
		cancel()
		if err != nil {
			t.Fatalf("exec tty=%t: %v (%s%s)", tty, err, out.String(), errOut.String())
		}
		if !tty && out.String() != "notty\ngot-ping\n" {
			t.Errorf("exec without a tty: %q, want \"notty\\ngot-ping\\n\"", out.String())
		}
		// A tty ends lines with \r\n and echoes the input, which may come
		// before or after the first line.
		if tty && (!strings.HasPrefix(strings.TrimPrefix(out.String(), "ping\r\n"), "tty\r\n") || !strings.HasSuffix(out.String(), "got-ping\r\n")) {
			t.Errorf("exec with a tty: %q, want tty\\r\\n, the echoed ping and got-ping\\r\\n", out.String())
		}
	}
}

// TestGuestStats compares the CRI's stats of a busy container with its
// scope's cgroup v2 files: CPU used, memory in use (16 MiB of shm), PSI
// and swap present.
func TestGuestStats(t *testing.T) {
	t.Parallel()
	g, d := guestTest(t)
	p := g.runPod(t, d, guestPodConfig("stats"))
	id := g.startIn(t, d, p, guestContainer("c", "sh", "-c",
		"i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; head -c 16777216 /dev/zero >/dev/shm/fill; touch /dev/shm/done; exec sleep 3600"))
	g.waitFor(t, "the container to fill its memory", g.Timeout(30*time.Second), func() bool {
		_, _, code := g.execSync(t, d, id, "test", "-e", "/dev/shm/done")
		return code == 0
	})
	scope := g.scopeDir(p, id)
	readUint := func(file, field string) uint64 {
		out := g.Run(t, "cat "+scope+"/"+file)
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if field == "" && len(f) == 1 || len(f) == 2 && f[0] == field {
				v, err := strconv.ParseUint(f[len(f)-1], 10, 64)
				if err == nil {
					return v
				}
			}
		}
		t.Fatalf("%s/%s: no %q in %q", scope, file, field, out)
		return 0
	}
	cpuBefore := readUint("cpu.stat", "usage_usec") * 1000
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(30*time.Second))
	defer cancel()
	st, err := d.Runtime.ContainerStats(ctx, id)
	if err != nil {
		t.Fatalf("ContainerStats: %v", err)
	}
	cpuAfter := readUint("cpu.stat", "usage_usec") * 1000
	mem := readUint("memory.current", "")

	if cpu := st.GetCpu().GetUsageCoreNanoSeconds().GetValue(); cpu == 0 || cpu < cpuBefore || cpu > cpuAfter {
		t.Errorf("CPU usage %d ns, want non-zero and between the cgroup's %d and %d", cpu, cpuBefore, cpuAfter)
	}
	ws := st.GetMemory().GetWorkingSetBytes().GetValue()
	if usage := st.GetMemory().GetUsageBytes().GetValue(); usage < 16<<20 || usage > 2*mem {
		t.Errorf("memory usage %d, want at least the 16 MiB written and near memory.current %d", usage, mem)
	}
	if ws < 16<<20 {
		t.Errorf("working set %d, want at least the 16 MiB of shm", ws)
	}
	if st.GetCpu().GetPsi() == nil || st.GetMemory().GetPsi() == nil {
		t.Errorf("no PSI in the stats (cpu %v, memory %v); the guest's kernel has it: %s",
			st.GetCpu().GetPsi(), st.GetMemory().GetPsi(), g.Run(t, "cat "+scope+"/cpu.pressure"))
	} else if st.GetCpu().GetPsi().GetSome() == nil {
		t.Errorf("CPU PSI without 'some': %v", st.GetCpu().GetPsi())
	}
	if st.GetSwap() == nil || st.GetSwap().GetSwapUsageBytes() == nil {
		t.Errorf("no swap usage in the stats on cgroup v2: %v", st.GetSwap())
	} else if got, want := st.GetSwap().GetSwapUsageBytes().GetValue(), readUint("memory.swap.current", ""); got != want {
		t.Errorf("swap usage %d, memory.swap.current %d", got, want)
	}
}

// TestGuestOOMKilled runs a container past its memory limit: the kernel
// kills it, and the CRI says OOMKilled although systemd removes the scope
// (and its memory.events) as soon as the process is gone.
func TestGuestOOMKilled(t *testing.T) {
	t.Parallel()
	g, d := guestTest(t)
	p := g.runPod(t, d, guestPodConfig("oom"))
	cfg := guestContainer("c", "sh", "-c", "tail /dev/zero")
	cfg.Linux = &runtime.LinuxContainerConfig{Resources: &runtime.LinuxContainerResources{MemoryLimitInBytes: 32 << 20}}
	id := g.startIn(t, d, p, cfg)
	st := d.waitExited(t, id, g.Timeout(60*time.Second))
	if st.GetReason() != "OOMKilled" || st.GetExitCode() != 137 {
		t.Errorf("exited with %d, reason %q (%s), want 137 OOMKilled", st.GetExitCode(), st.GetReason(), st.GetMessage())
	}
}

// TestGuestUpdateResources updates a running container's limits: they
// reach its systemd scope (the unit's properties, not only the cgroup
// files), and so survive a systemctl daemon-reload, which re-applies the
// unit's properties to the cgroup.
func TestGuestUpdateResources(t *testing.T) {
	t.Parallel()
	g, d := guestTest(t)
	p, id := g.sleeper(t, d, "update")
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(30*time.Second))
	defer cancel()
	res := &runtime.LinuxContainerResources{MemoryLimitInBytes: 96 << 20, CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512}
	if err := d.Runtime.UpdateContainerResources(ctx, id, &runtime.ContainerResources{Linux: res}); err != nil {
		t.Fatalf("UpdateContainerResources: %v", err)
	}
	scope := "minicri-" + id + ".scope"
	check := func(when string) {
		t.Helper()
		props := map[string]string{"MemoryMax": strconv.Itoa(96 << 20), "CPUQuotaPerSecUSec": "500ms"}
		for prop, want := range props {
			if got := g.systemdProperty(t, scope, prop); got != want {
				t.Errorf("%s: %s=%s, want %s", when, prop, got, want)
			}
		}
		files := map[string]string{"memory.max": strconv.Itoa(96 << 20), "cpu.max": "50000 100000"}
		for file, want := range files {
			if got := strings.TrimSpace(g.ReadFile(t, g.scopeDir(p, id)+"/"+file)); got != want {
				t.Errorf("%s: %s = %q, want %q", when, file, got, want)
			}
		}
		// Half the default shares: a weight below the default 100, the
		// same in the unit as in the cgroup (runc converts shares to a
		// weight; its formula changed between releases).
		weight := strings.TrimSpace(g.ReadFile(t, g.scopeDir(p, id)+"/cpu.weight"))
		if w, err := strconv.Atoi(weight); err != nil || w < 1 || w >= 100 {
			t.Errorf("%s: cpu.weight %q for cpu shares 512, want below the default 100", when, weight)
		}
		if got := g.systemdProperty(t, scope, "CPUWeight"); got != weight {
			t.Errorf("%s: CPUWeight=%s, the cgroup's cpu.weight %s", when, got, weight)
		}
	}
	check("after the update")
	g.Run(t, "systemctl daemon-reload")
	check("after systemctl daemon-reload")
}

// TestGuestSharedPID runs a pod whose containers share one PID namespace
// with the pod's infra process: each sees the other's processes, PID 1 is
// the infra process, confined by AppArmor like the containers.
func TestGuestSharedPID(t *testing.T) {
	t.Parallel()
	g, d := guestTest(t)
	cfg := guestPodConfig("pid")
	ns := &runtime.NamespaceOption{Pid: runtime.NamespaceMode_POD}
	cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: ns}
	p := g.runPod(t, d, cfg)
	withNS := func(c *runtime.ContainerConfig) *runtime.ContainerConfig {
		c.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{NamespaceOptions: ns}}
		return c
	}
	g.startIn(t, d, p, withNS(guestContainer("a", "sleep", "3601")))
	b := g.startIn(t, d, p, withNS(guestContainer("b", "sleep", "3602")))
	out, _, code := g.execSync(t, d, b, "ps", "-o", "pid,args")
	if code != 0 || !strings.Contains(out, "sleep 3601") || !strings.Contains(out, "sleep 3602") {
		t.Errorf("ps in b (exit %d) does not show both containers:\n%s", code, out)
	}
	if comm, _, _ := g.execSync(t, d, b, "cat", "/proc/1/comm"); !strings.Contains(comm, "pause") {
		t.Errorf("PID 1 of the pod is %q, want the infra process", comm)
	}
	if label, _, _ := g.execSync(t, d, b, "cat", "/proc/1/attr/current"); !strings.Contains(label, "minicri-default") {
		t.Errorf("the infra process's AppArmor label is %q, want minicri-default", label)
	}
	// The infra process lives in the pod's slice, not in the daemon's
	// cgroup; neither does any monitor (each gets a scope of its own).
	infra := d.infraProcess(t, p.ID)
	if infra == 0 {
		t.Fatalf("PodSandboxStatus names no infra process for a PID-sharing pod")
	}
	if cg := g.ReadFile(t, fmt.Sprintf("/proc/%d/cgroup", infra)); !strings.Contains(cg, "/"+p.Slice+"/") {
		t.Errorf("the infra process's cgroup is %q, want one in the pod's slice %s", strings.TrimSpace(cg), p.Slice)
	}
	// A monitor is moved right after it starts: poll, as other tests start theirs.
	for deadline := time.Now().Add(g.Timeout(10 * time.Second)); ; time.Sleep(time.Second) {
		inDaemon := strings.TrimSpace(g.Run(t, `for p in $(pgrep -x minicri-conmon); do grep -l minicri.service /proc/$p/cgroup 2>/dev/null; done; true`))
		if inDaemon == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("monitors still in minicri.service's cgroup after %s: %s", g.Timeout(10*time.Second), inDaemon)
			break
		}
	}
}

// TestGuestUserNamespace runs a hostUsers: false pod. Status must say what
// the node can do: where it advertises user namespaces for the default
// handler the pod runs with the mapping asked for; where it does not, its
// kernelFeatures name what the kernel lacks (idmapped tmpfs mounts before
// 6.3, idmapped layers before 5.12/5.19), and the pod is refused at once
// with an error that names the same feature.
func TestGuestUserNamespace(t *testing.T) {
	t.Parallel()
	g, d := guestTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(time.Minute))
	defer cancel()
	status, err := d.Runtime.Status(ctx, false)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	advertised := false
	for _, h := range status.GetRuntimeHandlers() {
		if h.GetName() == "" {
			advertised = h.GetFeatures().GetUserNamespaces()
		}
	}
	t.Logf("kernel %s: user namespaces advertised: %t", g.KernelRelease, advertised)
	cfg := guestPodConfig("userns")
	ids := []*runtime.IDMapping{{HostId: 17 << 16, ContainerId: 0, Length: 1 << 16}}
	ns := &runtime.NamespaceOption{UsernsOptions: &runtime.UserNamespace{Mode: runtime.NamespaceMode_POD, Uids: ids, Gids: ids}}
	cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: ns}
	missing := g.missingKernelFeatures(t, d, guestUsernsKernel...)
	if advertised != (missing == "") {
		t.Fatalf("Status: user namespaces advertised %t, but the kernel lacks %q", advertised, missing)
	}
	if !advertised {
		id, err := d.Runtime.RunPodSandbox(ctx, cfg, "")
		if err == nil {
			_ = d.Runtime.StopPodSandbox(ctx, id)
			_ = d.Runtime.RemovePodSandbox(ctx, id)
			t.Fatalf("a hostUsers: false pod ran although Status does not advertise user namespaces")
		}
		named := false
		for _, f := range guestUsernsKernel {
			named = named || strings.Contains(missing, f) && strings.Contains(err.Error(), f)
		}
		if !strings.Contains(strings.ToLower(err.Error()), "user namespace") || !named {
			t.Errorf("RunPodSandbox refused the pod with %v, want an error naming user namespaces and what the kernel lacks (%s)", err, missing)
		}
		return
	}
	p := g.runPod(t, d, cfg)
	c := guestContainer("c", "sleep", "3600")
	c.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{NamespaceOptions: ns}}
	id := g.startIn(t, d, p, c)
	out, _, code := g.execSync(t, d, id, "cat", "/proc/self/uid_map")
	if f := strings.Fields(out); code != 0 || len(f) != 3 || f[0] != "0" || f[1] != strconv.Itoa(17<<16) || f[2] != "65536" {
		t.Errorf("uid_map in the container (exit %d): %q, want 0 %d 65536", code, out, 17<<16)
	}
}

// TestGuestAppArmor: every container and exec runs under minicri's default
// profile, in enforce mode (a write to /proc/sysrq-trigger is denied even
// to root), and a localhost profile the node has not loaded is refused at
// create with an error naming it.
func TestGuestAppArmor(t *testing.T) {
	t.Parallel()
	g, d := guestTest(t)
	p, id := g.sleeper(t, d, "apparmor")
	pid := g.containerPID(t, p, id)
	if got := strings.TrimSpace(g.ReadFile(t, fmt.Sprintf("/proc/%d/attr/current", pid))); got != "minicri-default (enforce)" {
		t.Errorf("the container's AppArmor label is %q, want minicri-default (enforce)", got)
	}
	if out, _, _ := g.execSync(t, d, id, "cat", "/proc/self/attr/current"); strings.TrimSpace(out) != "minicri-default (enforce)" {
		t.Errorf("an exec's AppArmor label is %q, want minicri-default (enforce)", out)
	}
	if out, errOut, code := g.execSync(t, d, id, "sh", "-c", "echo h >/proc/sysrq-trigger"); code == 0 {
		t.Errorf("a write to /proc/sysrq-trigger succeeded (%s%s)", out, errOut)
	} else if !strings.Contains(errOut, "denied") && !strings.Contains(errOut, "Read-only") {
		t.Errorf("a write to /proc/sysrq-trigger failed with %q, want permission denied", errOut)
	}

	c := guestContainer("unloaded", "true")
	c.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
		Apparmor: &runtime.SecurityProfile{ProfileType: runtime.SecurityProfile_Localhost, LocalhostRef: "minicri-e2e-not-loaded"},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(30*time.Second))
	defer cancel()
	if cid, err := d.Runtime.CreateContainer(ctx, p.ID, c, p.Cfg); err == nil {
		_ = d.Runtime.RemoveContainer(ctx, cid)
		t.Errorf("a container with the unloaded AppArmor profile minicri-e2e-not-loaded was created")
	} else if !strings.Contains(err.Error(), "minicri-e2e-not-loaded") {
		t.Errorf("CreateContainer with an unloaded profile: %v, want an error naming it", err)
	}
}

// TestGuestRestart restarts minicri.service (KillMode=process): the pod's
// container keeps running, the same process, and the daemon finds it again.
func TestGuestRestart(t *testing.T) {
	g, d := guestTest(t)
	p := g.runPod(t, d, guestPodConfig("restart"))
	id := g.startIn(t, d, p, guestContainer("c", "sleep", "3600"))
	pid := g.containerPID(t, p, id)
	g.Run(t, "systemctl restart minicri.service")
	if got := g.systemdProperty(t, "minicri.service", "ActiveState"); got != "active" {
		t.Fatalf("minicri.service %s after the restart", got)
	}
	if got := g.containerPID(t, p, id); got != pid {
		t.Errorf("the container's process is %d after the restart, was %d", got, pid)
	}
	// The forwarded socket reconnects: the CRI client dials again.
	var st *runtime.ContainerStatus
	g.waitFor(t, "the restarted daemon to answer", g.Timeout(20*time.Second), func() bool {
		resp, err := d.Runtime.ContainerStatus(context.Background(), id, false)
		st = resp.GetStatus()
		return err == nil
	})
	if st.GetState() != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the container is %s after the restart, want running", st.GetState())
	}
	if out, _, code := g.execSync(t, d, id, "echo", "still-here"); code != 0 || !bytes.Contains([]byte(out), []byte("still-here")) {
		t.Errorf("exec after the restart: %q exit %d", out, code)
	}
}

// TestGuestScopesGoWhileSystemdReloads removes pods while systemd reloads
// its units over and over (systemctl daemon-reload, as every package
// install does): the pods' infra processes and their containers' monitor
// end mid-reload. systemd before 249 misses a scope's cgroup running empty
// during a reload and keeps the scope "active (running)" for good, so
// minicri stops the scopes of its own processes itself. Once the reloads
// have stopped, nothing of the pods may be left: no unit, cgroup, mount or
// process. The pods share their PID namespaces, so that each has an infra
// process with a scope of its own. Not parallel: the reloads slow every
// systemd job in the guest.
func TestGuestScopesGoWhileSystemdReloads(t *testing.T) {
	g, d := guestTest(t)
	var pods []*guestPod
	keys := []string{}
	// Each pod shares its PID namespace, so it has an infra process (and
	// its scope) beside its container's monitor.
	ns := &runtime.NamespaceOption{Pid: runtime.NamespaceMode_POD}
	for i := range 3 {
		cfg := guestPodConfig(fmt.Sprintf("reload%d", i))
		cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: ns}
		p := g.runPod(t, d, cfg)
		c := guestContainer("c", "sleep", "3600")
		c.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{NamespaceOptions: ns}}
		id := g.startIn(t, d, p, c)
		if got := g.systemdProperty(t, "minicri-pause-"+p.ID+".scope", "ActiveState"); got != "active" {
			t.Fatalf("the infra process's scope of pod %s is %q, want active", p.ID, got)
		}
		pods = append(pods, p)
		keys = append(keys, p.ID, id)
	}
	loop := g.startReloads(t)
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(time.Minute))
	defer cancel()
	for _, p := range pods {
		if err := d.Runtime.StopPodSandbox(ctx, p.ID); err != nil {
			t.Fatalf("StopPodSandbox %s: %v", p.ID, err)
		}
		if err := d.Runtime.RemovePodSandbox(ctx, p.ID); err != nil {
			t.Fatalf("RemovePodSandbox %s: %v", p.ID, err)
		}
	}
	// The pods must have gone while systemd was reloading, or this test
	// tested nothing.
	during, active := loop.progress(t)
	if !active {
		t.Fatalf("the reload loop had ended (after %d reloads) before the pods were removed: raise its bounds", during)
	}
	loop.stop(t)
	t.Logf("systemd reloads while the pods were removed: %d", during)
	if left := g.settledLeftovers(t, keys...); left != "" {
		t.Errorf("left behind in the guest after the pods were removed during reloads:\n%s", left)
	}
}

// reloadLoop is a loop of systemctl daemon-reload running in the guest as
// a transient service of its own (systemd-run): systemd ends it at its
// RuntimeMaxSec whatever happens to the test, and the test's cleanup stops
// it.
type reloadLoop struct {
	g    *Guest
	unit string
}

// reloadsBound bounds the loop's reloads; RuntimeMaxSec bounds its time.
const reloadsBound = 2000

// startReloads starts the loop, stopped at the latest when the test ends,
// and returns once systemd has done its first reload.
func (g *Guest) startReloads(t *testing.T) *reloadLoop {
	t.Helper()
	l := &reloadLoop{g: g, unit: "minicri-e2e-reloads-" + randomHex(4)}
	// A file, not a command line: systemd expands $ in a unit's command
	// line, some releases for systemd-run's too. Back to back, so that the
	// pods' processes end while systemd reloads; the jobs of their removal
	// run between two reloads.
	g.WriteFile(t, l.script(), []byte(fmt.Sprintf(`i=0
while [ "$i" -lt %d ]; do
	systemctl daemon-reload || exit 1
	i=$((i+1))
	echo "$i" >%s.tmp && mv %s.tmp %s
done
`, reloadsBound, l.count(), l.count(), l.count())), 0o644)
	// Registered before the start: a start that timed out on the host's
	// side may still have started the unit in the guest.
	t.Cleanup(func() { l.stop(t) })
	// --no-block: systemd-run returns once the start is queued.
	start := fmt.Sprintf("systemd-run --quiet --no-block --collect --unit=%s --property=RuntimeMaxSec=%d /bin/sh %s",
		l.unit, int(g.Timeout(75*time.Second).Seconds()), l.script())
	if _, err := g.runWithin(start, g.Timeout(15*time.Second)); err != nil {
		t.Fatalf("start the reload loop: %v", err)
	}
	g.waitFor(t, "systemd's first reload of the loop", g.Timeout(30*time.Second), func() bool {
		n, _ := l.progress(t)
		return n > 0
	})
	return l
}

func (l *reloadLoop) script() string { return "/run/" + l.unit + ".sh" }
func (l *reloadLoop) count() string  { return "/run/" + l.unit + ".count" }

// progress is how many reloads the loop has done, and whether it still
// runs.
func (l *reloadLoop) progress(t *testing.T) (int, bool) {
	t.Helper()
	out := l.g.Run(t, fmt.Sprintf("cat %s 2>/dev/null || echo 0; systemctl is-active %s || true", l.count(), l.unit))
	f := strings.Fields(out)
	if len(f) < 2 {
		t.Fatalf("reload loop's progress: %q", out)
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatalf("reload loop's count %q: %v", f[0], err)
	}
	return n, f[1] == "active"
}

// stop stops the loop's unit and removes its files; stopping it again, or
// a unit systemd has already collected, is no error.
func (l *reloadLoop) stop(t *testing.T) {
	t.Helper()
	out, err := l.g.runWithin(fmt.Sprintf(`systemctl stop %[1]s 2>/dev/null
if systemctl is-active --quiet %[1]s; then echo "%[1]s still active"; exit 1; fi
rm -f %[2]s %[3]s %[3]s.tmp`, l.unit, l.script(), l.count()), l.g.Timeout(30*time.Second))
	if err != nil {
		t.Errorf("stop the reload loop: %v: %s", err, out)
	}
}
