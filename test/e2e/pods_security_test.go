//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// hostNetworkPod is a pod config that needs no CNI network.
func (d *Daemon) hostNetworkPod(name string) *runtime.PodSandboxConfig {
	cfg := d.podConfig(name)
	cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE}}
	return cfg
}

// ownCapabilities is a capability set of the test process: a privileged
// container gets all that the daemon itself may hold.
func ownCapabilities(t *testing.T, field string) string {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":\t"); ok {
			return v
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return ""
}

// The security context is checked from inside the container.
func TestSecurityContextFromInside(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("sec")
	pod := d.runPod(t, podCfg)

	cases := []struct {
		name  string
		cmd   string
		sc    *runtime.LinuxContainerSecurityContext
		wants []string
	}{
		{
			name:  "default capabilities, no seccomp",
			cmd:   "grep -E '^(CapEff|Seccomp):' /proc/self/status",
			sc:    &runtime.LinuxContainerSecurityContext{},
			wants: []string{"CapEff:\t00000000a80425fb", "Seccomp:\t0"},
		},
		{
			name: "drop all, add one",
			cmd:  "grep CapEff /proc/self/status",
			sc: &runtime.LinuxContainerSecurityContext{Capabilities: &runtime.Capability{
				DropCapabilities: []string{"ALL"}, AddCapabilities: []string{"NET_BIND_SERVICE"}}},
			wants: []string{"CapEff:\t0000000000000400"},
		},
		{
			name:  "runtime default seccomp and no_new_privs",
			cmd:   "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status",
			sc:    &runtime.LinuxContainerSecurityContext{NoNewPrivs: true, Seccomp: &runtime.SecurityProfile{ProfileType: runtime.SecurityProfile_RuntimeDefault}},
			wants: []string{"Seccomp:\t2", "NoNewPrivs:\t1"},
		},
		{
			name:  "read-only rootfs",
			cmd:   "touch /newfile 2>&1 || echo write-refused; touch /tmp/x 2>&1 || echo tmp-refused",
			sc:    &runtime.LinuxContainerSecurityContext{ReadonlyRootfs: true},
			wants: []string{"write-refused", "tmp-refused"},
		},
		{
			name:  "run as user and group",
			cmd:   "id",
			sc:    &runtime.LinuxContainerSecurityContext{RunAsUser: &runtime.Int64Value{Value: 1000}, RunAsGroup: &runtime.Int64Value{Value: 3000}, SupplementalGroups: []int64{4000}},
			wants: []string{"uid=1000(app) gid=3000", "4000"},
		},
		{
			name:  "masked and read-only proc paths",
			cmd:   "wc -c < /proc/timer_list; echo 1 > /proc/sys/kernel/domainname 2>/dev/null || echo sys-readonly",
			sc:    &runtime.LinuxContainerSecurityContext{},
			wants: []string{"0\n", "sys-readonly"},
		},
		{
			name:  "privileged",
			cmd:   "grep CapEff /proc/self/status",
			sc:    &runtime.LinuxContainerSecurityContext{Privileged: true},
			wants: []string{"CapEff:\t" + ownCapabilities(t, "CapBnd")},
		},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := containerConfig("sec"+string(rune('a'+i)), ref, "sh", "-c", c.cmd)
			cfg.Linux = &runtime.LinuxContainerConfig{SecurityContext: c.sc}
			_, log := d.runToExit(t, pod, podCfg, cfg)
			for _, want := range c.wants {
				if !strings.Contains(log, want) {
					t.Errorf("output lacks %q:\n%s", want, log)
				}
			}
		})
	}
}

func TestOOMKilledReason(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("oom")
	pod := d.runPod(t, podCfg)
	cfg := containerConfig("hog", ref, "sh", "-c", "dd if=/dev/zero of=/dev/null bs=64M count=1")
	cfg.Linux = &runtime.LinuxContainerConfig{Resources: &runtime.LinuxContainerResources{MemoryLimitInBytes: 16 << 20}}
	st, log := d.runToExit(t, pod, podCfg, cfg)
	if st.GetReason() != "OOMKilled" || st.GetExitCode() != 137 {
		t.Fatalf("reason %q exit %d (log %q), want OOMKilled and 137", st.GetReason(), st.GetExitCode(), log)
	}
}

func TestUpdateContainerResources(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("update")
	pod := d.runPod(t, podCfg)
	cfg := containerConfig("c", ref, "sleep", "300")
	cfg.Linux = &runtime.LinuxContainerConfig{Resources: &runtime.LinuxContainerResources{MemoryLimitInBytes: 64 << 20}}
	id := d.startContainer(t, pod, podCfg, cfg)
	ctx := context.Background()
	if err := d.Runtime.UpdateContainerResources(ctx, id, &runtime.ContainerResources{Linux: &runtime.LinuxContainerResources{MemoryLimitInBytes: 96 << 20}}); err != nil {
		t.Fatal(err)
	}
	limit, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", podCfg.GetLinux().GetCgroupParent(), id, "memory.limit_in_bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(limit)); got != "100663296" {
		t.Errorf("memory.limit_in_bytes = %s after the update, want 100663296", got)
	}
	if got := d.status(t, id).GetResources().GetLinux().GetMemoryLimitInBytes(); got != 96<<20 {
		t.Errorf("status reports memory limit %d, want the updated one", got)
	}
	err = d.Runtime.UpdateContainerResources(ctx, id, &runtime.ContainerResources{Linux: &runtime.LinuxContainerResources{CpuShares: -1}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("negative cpu shares: %v, want InvalidArgument", err)
	}
}

// buildSeccompProbe builds testdata/seccompprobe, static, into a temp dir of
// its own that a container can bind-mount.
func buildSeccompProbe(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", tmpPrefix+"probe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cmd := exec.Command("go", "build", "-o", dir, "./testdata/seccompprobe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the seccomp probe: %v\n%s", err, out)
	}
	return dir
}

// RuntimeDefault is an allow list: syscalls that a deny list lets through
// (a personality that turns ASLR off, the NUMA calls) are refused with EPERM,
// while ordinary programs run; Unconfined shows the probe's calls work.
func TestRuntimeDefaultSeccompIsAnAllowList(t *testing.T) {
	probeDir := buildSeccompProbe(t)
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("seccomp")
	pod := d.runPod(t, podCfg)

	const script = "true && echo true-ran; /probe/seccompprobe personality-linux personality-addr-no-randomize get_mempolicy"
	cases := []struct {
		name    string
		profile runtime.SecurityProfile_ProfileType
		wants   []string
	}{
		{"runtime-default", runtime.SecurityProfile_RuntimeDefault, []string{
			"true-ran",
			"personality-linux: ok",
			"personality-addr-no-randomize: operation not permitted",
			"get_mempolicy: operation not permitted",
		}},
		{"unconfined", runtime.SecurityProfile_Unconfined, []string{
			"true-ran",
			"personality-linux: ok",
			"personality-addr-no-randomize: ok",
			"get_mempolicy: ok",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := containerConfig(c.name, ref, "sh", "-c", script)
			cfg.Mounts = []*runtime.Mount{{ContainerPath: "/probe", HostPath: probeDir, Readonly: true}}
			cfg.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
				Seccomp: &runtime.SecurityProfile{ProfileType: c.profile},
			}}
			st, log := d.runToExit(t, pod, podCfg, cfg)
			if st.GetExitCode() != 0 {
				t.Fatalf("exit code %d, want 0; log:\n%s", st.GetExitCode(), log)
			}
			for _, want := range c.wants {
				if !strings.Contains(log, want+"\n") {
					t.Errorf("output lacks %q:\n%s", want, log)
				}
			}
		})
	}
}

// On a host without AppArmor (as this one) the default profile is neither
// loaded nor applied: containers with no profile or RuntimeDefault run, and
// their spec names no profile. Hosts with AppArmor are covered by the unit
// tests of oci (the profile's text and the load decision).
func TestAppArmorDisabledHostRunsContainers(t *testing.T) {
	if data, err := os.ReadFile("/sys/module/apparmor/parameters/enabled"); err == nil && strings.HasPrefix(string(data), "Y") {
		t.Skip("AppArmor is enabled on this host")
	}
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("apparmor")
	pod := d.runPod(t, podCfg)
	for _, c := range []struct {
		name string
		sc   *runtime.LinuxContainerSecurityContext
	}{
		{"none", &runtime.LinuxContainerSecurityContext{}},
		{"runtime-default", &runtime.LinuxContainerSecurityContext{Apparmor: &runtime.SecurityProfile{ProfileType: runtime.SecurityProfile_RuntimeDefault}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := containerConfig(c.name, ref, "sh", "-c", "echo started")
			cfg.Linux = &runtime.LinuxContainerConfig{SecurityContext: c.sc}
			id := d.createContainer(t, pod, podCfg, cfg)
			data, err := os.ReadFile(filepath.Join(d.RunDir, "containers", id, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			var spec struct {
				Process struct {
					ApparmorProfile *string `json:"apparmorProfile"`
				} `json:"process"`
			}
			if err := json.Unmarshal(data, &spec); err != nil {
				t.Fatal(err)
			}
			if spec.Process.ApparmorProfile != nil {
				t.Errorf("spec names AppArmor profile %q on a host without AppArmor", *spec.Process.ApparmorProfile)
			}
			if err := d.Runtime.StartContainer(context.Background(), id); err != nil {
				t.Fatalf("StartContainer: %v", err)
			}
			st := d.waitExited(t, id, 30*time.Second)
			if log := readLog(t, st.GetLogPath()); st.GetExitCode() != 0 || log != "started\n" {
				t.Errorf("exit %d log %q, want 0 and \"started\"", st.GetExitCode(), log)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(d.RunDir, "apparmor")); err == nil {
		t.Errorf("the daemon wrote an AppArmor profile on a host without AppArmor")
	}
}

// asNobody runs a host command as uid/gid 65534 with no groups and returns
// its combined output and whether it succeeded.
func asNobody(t *testing.T, name string, args ...string) (string, bool) {
	t.Helper()
	return asUID(t, nobodyUID, "", name, args...)
}

// A pod's /dev/shm is a 1777 tmpfs below the run dir; /proc/self/mountinfo
// shows any host user where. Host users must not reach it (the class of
// CVE-2021-41091): the run dir, pods dir and pod dirs are 0700. The
// containers, which runc sets up as root, still use it, as do exec and logs.
func TestPodDirsUnreachableByHostUsers(t *testing.T) {
	d := StartDaemon(t)
	// The test's temp dir is 0700 itself; open it as /run is, so that only
	// the daemon's own modes keep host users out.
	if err := os.Chmod(d.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("podperms")
	pod := d.runPod(t, podCfg)
	cfg := containerConfig("app", ref, "sh", "-c", "echo from-app > /dev/shm/app && cat /etc/hostname && sleep 300")
	cfg.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{RunAsUser: &runtime.Int64Value{Value: 1000}}}
	id := d.startContainer(t, pod, podCfg, cfg)

	podDir := filepath.Join(d.RunDir, "pods", pod)
	shm := filepath.Join(podDir, "shm")
	waitFor(t, "the container's file in the pod's shm", 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(shm, "app"))
		return err == nil
	})
	for _, dir := range []string{d.RunDir, filepath.Join(d.RunDir, "pods"), podDir} {
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v (%v), want 0700", dir, fi.Mode().Perm(), err)
		}
	}
	if fi, err := os.Stat(shm); err != nil || fi.Mode()&(os.ModePerm|os.ModeSticky) != 0o777|os.ModeSticky {
		t.Errorf("pod shm: mode %v (%v), want 1777 for the containers", fi.Mode(), err)
	}

	if out, ok := asNobody(t, "ls", shm); ok {
		t.Errorf("nobody can list the pod's shm:\n%s", out)
	}
	if out, ok := asNobody(t, "touch", filepath.Join(shm, "planted")); ok {
		t.Errorf("nobody can create a file in the pod's shm:\n%s", out)
	}
	if out, ok := asNobody(t, "cat", filepath.Join(podDir, "hosts")); ok {
		t.Errorf("nobody can read the pod's hosts file:\n%s", out)
	}

	// The container (uid 1000) still uses /dev/shm; exec and logs work.
	ctx := context.Background()
	stdout, stderr, err := d.Runtime.ExecSync(ctx, id, []string{"sh", "-c", "cat /dev/shm/app && echo from-exec > /dev/shm/exec && id -u"}, 10*time.Second)
	if err != nil || string(stdout) != "from-app\n1000\n" {
		t.Errorf("exec: stdout %q stderr %q err %v, want the app's file read and uid 1000", stdout, stderr, err)
	}
	if data, err := os.ReadFile(filepath.Join(shm, "exec")); err != nil || string(data) != "from-exec\n" {
		t.Errorf("the exec's file in the pod's shm: %q %v", data, err)
	}
	if log := readLog(t, d.status(t, id).GetLogPath()); log != "podperms\n" {
		t.Errorf("container log %q, want its hostname", log)
	}
}
