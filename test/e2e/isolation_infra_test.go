//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// buildPtraceProbe builds testdata/ptraceprobe, static, into a temp dir of
// its own that a container can bind-mount and a pod's user namespace can
// reach.
func buildPtraceProbe(t *testing.T) string { return buildStaticC(t, "ptraceprobe") }

// The infra process of a PID-sharing pod (PID 1 of its containers) holds
// nothing worth taking (docs/security.md, "The pod infra process"): a
// container given CAP_SYS_PTRACE that makes it open a root-only host file,
// or create a file in a root-only host dir, gets neither done, and any
// container sees in /proc/1 an unprivileged uid, no capability,
// no_new_privs, a seccomp filter and no mount of the host's. In the host's
// user namespace and in a pod's own.
func TestInfraProcessHoldsNothing(t *testing.T) {
	if goruntime.GOARCH != "amd64" {
		t.Skip("the ptrace probe injects x86_64 system calls")
	}
	probe := buildPtraceProbe(t)
	for _, userns := range []bool{false, true} {
		name := map[bool]string{false: "host-users", true: "userns"}[userns]
		t.Run(name, func(t *testing.T) {
			testInfraProcessHoldsNothing(t, probe, userns)
		})
	}
}

func testInfraProcessHoldsNothing(t *testing.T, probe string, userns bool) {
	var d *Daemon
	var ref, handler string
	if userns {
		d, ref = startUsernsDaemon(t)
		handler = usernsHandler
	} else {
		d = StartDaemon(t)
		ref = busyboxRef(t)
		d.pull(t, ref)
	}
	// Root's alone on the host: 0700 dirs, a 0600 file.
	secrets := t.TempDir()
	const secret = "infra-secret-7f3a9c"
	secretFile := filepath.Join(secrets, "secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rootOnly := filepath.Join(secrets, "root-only")
	if err := os.Mkdir(rootOnly, 0o700); err != nil {
		t.Fatal(err)
	}
	created := filepath.Join(rootOnly, "by-infra")

	// One pod per attack: the first call the infra process's filter
	// refuses ends it, and its PID namespace with it.
	for _, attack := range []struct{ mode, path string }{{"read", secretFile}, {"create", created}} {
		t.Run(attack.mode, func(t *testing.T) {
			podCfg := d.podConfig("infra-" + attack.mode)
			nsOpts := &runtime.NamespaceOption{Pid: runtime.NamespaceMode_POD}
			if userns {
				nsOpts.UsernsOptions = usernsOptions()
			} else {
				nsOpts.Network = runtime.NamespaceMode_NODE
			}
			podCfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: nsOpts}
			pod := d.runPodOn(t, podCfg, handler)

			ctr := containerConfig("attacker", ref, "sh", "-c",
				`grep -E '^(Uid|Gid|CapPrm|CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/1/status; `+
					`echo mountinfo-begin; cat /proc/1/mountinfo 2>&1; echo mountinfo-end; `+
					`/probe/ptraceprobe 1 `+attack.mode+` `+attack.path+` 2>&1; echo probe-exit=$?`)
			ctr.Mounts = []*runtime.Mount{{ContainerPath: "/probe", HostPath: probe, Readonly: true}}
			ctr.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
				Capabilities:     &runtime.Capability{AddCapabilities: []string{"SYS_PTRACE"}},
				NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_POD, UsernsOptions: nsOpts.UsernsOptions},
			}}
			_, out := d.runToExit(t, pod, podCfg, ctr)
			mounts := between(out, "mountinfo-begin\n", "mountinfo-end\n")
			t.Logf("the attacker's output, PID 1's mount table left out (%d lines):\n%s", strings.Count(mounts, "\n"), strings.Replace(out, mounts, "", 1))

			assertInfraStatus(t, out)
			for _, host := range []string{d.Root, d.RunDir, d.Dir, "/usr", "/work", "/tmp"} {
				if strings.Contains(mounts, " "+host) {
					t.Errorf("PID 1's mount table names the host's %s", host)
				}
			}
			// Attached, or refused at once: either way it ran.
			if !strings.Contains(out, "attached\n") && !strings.Contains(out, "seize: ") {
				t.Errorf("the probe never ran")
			}
			if strings.Contains(out, secret) || strings.Contains(out, "created: ") {
				t.Errorf("PID 1 did the attacker's %s of %s", attack.mode, attack.path)
			}
			if _, err := os.Stat(created); err == nil {
				os.Remove(created)
				t.Errorf("PID 1 created %s in a root-only host dir", created)
			}
		})
	}
}

// assertInfraStatus checks the /proc/1/status lines the attacker printed.
func assertInfraStatus(t *testing.T, out string) {
	t.Helper()
	fields := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		if name, value, ok := strings.Cut(line, ":"); ok {
			fields[name] = strings.Fields(value)
		}
	}
	for _, name := range []string{"CapPrm", "CapEff", "CapBnd"} {
		if got := fields[name]; len(got) != 1 || got[0] != "0000000000000000" {
			t.Errorf("PID 1 %s = %v, want 0000000000000000", name, got)
		}
	}
	for _, name := range []string{"Uid", "Gid"} {
		if got := fields[name]; len(got) != 4 || strings.Join(got, " ") != "65535 65535 65535 65535" {
			t.Errorf("PID 1 %s = %v, want 65535 throughout, not root", name, got)
		}
	}
	if got := fields["NoNewPrivs"]; len(got) != 1 || got[0] != "1" {
		t.Errorf("PID 1 NoNewPrivs = %v, want 1", got)
	}
	if got := fields["Seccomp"]; len(got) != 1 || got[0] != "2" {
		t.Errorf("PID 1 Seccomp = %v, want 2 (a filter)", got)
	}
}

// between is the text of s from after begin to before end.
func between(s, begin, end string) string {
	_, rest, _ := strings.Cut(s, begin)
	inner, _, _ := strings.Cut(rest, end)
	return inner
}

// A pod whose infra process cannot start or cannot confine itself fails
// RunPodSandbox with the reason and leaves nothing: no record, no pod dir,
// no process. The daemon's monitor is a copy beside which minicri-pause is
// missing, or is a program that fails as the real one does.
func TestInfraProcessFailureFailsThePod(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pause  string // the script installed as minicri-pause, "" for none
		code   codes.Code
		reason string
	}{
		{"missing", "", codes.FailedPrecondition, "minicri-pause not found"},
		{"cannot confine", "#!/bin/sh\necho 'minicri-pause: pivot_root: Invalid argument' >&2\nexit 1\n", codes.Internal, "pivot_root: Invalid argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := t.TempDir()
			monitor := filepath.Join(bin, "minicri-conmon")
			copyFile(t, filepath.Join(binDir, "minicri-conmon"), monitor, 0o755)
			if tc.pause != "" {
				if err := os.WriteFile(filepath.Join(bin, "minicri-pause"), []byte(tc.pause), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			d := StartDaemon(t, WithConfig(fmt.Sprintf("[runtime]\nmonitor_path = %q\n", monitor)))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			id, err := d.Runtime.RunPodSandbox(ctx, d.hostNetworkPod("infra-fails"), "")
			if err == nil {
				t.Cleanup(func() { _ = d.Runtime.StopPodSandbox(ctx, id); _ = d.Runtime.RemovePodSandbox(ctx, id) })
				t.Fatal("RunPodSandbox succeeded without an infra process")
			}
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("RunPodSandbox = %v, want %v saying %q", err, tc.code, tc.reason)
			}
			if pods, err := d.Runtime.ListPodSandbox(ctx, nil); err != nil || len(pods) != 0 {
				t.Errorf("after the failure: %d pods listed (%v), want none", len(pods), err)
			}
			if entries, _ := os.ReadDir(filepath.Join(d.RunDir, "pods")); len(entries) > 0 {
				t.Errorf("pod dirs left: %v", entries)
			}
			procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
			for _, p := range procs {
				if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), d.RunDir+"/pods") {
					t.Errorf("a process of the failed pod is left: %s %q", p, b)
				}
			}
		})
	}
}

// A user-namespaced pod whose mappings leave out 65535, the ID its infra
// process takes, is refused as malformed before anything is made: its
// infra process would stay the namespace's root.
func TestUserNamespaceWithoutPauseIDRefused(t *testing.T) {
	requireCurrentRunc(t)
	d := StartDaemon(t)
	cfg := d.usernsPodConfig("no-pause-id")
	for _, m := range [][]*runtime.IDMapping{cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions.Uids, cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions.Gids} {
		m[0].Length = 65535 // 0-65534
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := d.Runtime.RunPodSandbox(ctx, cfg, usernsHandler)
	if err == nil {
		t.Cleanup(func() { _ = d.Runtime.StopPodSandbox(ctx, id); _ = d.Runtime.RemovePodSandbox(ctx, id) })
	}
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "65535") {
		t.Fatalf("RunPodSandbox with 65535 unmapped = %v, want InvalidArgument naming 65535", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(d.RunDir, "pods")); len(entries) > 0 {
		t.Errorf("pod dirs left: %v", entries)
	}
}

// copyFile copies src to dst with mode.
func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}

// A process whose command line is exactly that of a pod infra process of
// this daemon (minicri-pause pause --pod RUN_DIR/pods/ID) is not taken for
// one: the daemon finds its infra processes again only from the records it
// wrote in its own pod dirs (docs/security.md). One forged in a container,
// naming a pod dir that does not exist, and one started on the host,
// naming the container's own pod's dir, both outlive a daemon restart and
// its start-up sweep. The sweep that read every command line SIGKILLed
// both.
func TestInfraForgedCommandLineKillsNothing(t *testing.T) {
	forge := buildStaticC(t, "forgedpause")
	// The name an infra process's command line starts with.
	if err := os.Link(filepath.Join(forge, "forgedpause"), filepath.Join(forge, "minicri-pause")); err != nil {
		t.Fatal(err)
	}
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	pods := filepath.Join(d.RunDir, "pods")

	podCfg := d.hostNetworkPod("forger")
	pod := d.runPod(t, podCfg)
	unknown := filepath.Join(pods, randomHex(32))
	ctr := containerConfig("forger", ref, "minicri-pause", "pause", "--pod", unknown)
	ctr.Mounts = []*runtime.Mount{{ContainerPath: "/forge", HostPath: forge, Readonly: true}}
	ctr.Envs = []*runtime.KeyValue{{Key: "PATH", Value: []byte("/forge:/usr/bin:/bin")}}
	id := d.startContainer(t, pod, podCfg, ctr)
	inPod := d.containerPID(t, id)

	host := &exec.Cmd{
		Path: filepath.Join(forge, "forgedpause"),
		Args: []string{"minicri-pause", "pause", "--pod", filepath.Join(pods, pod)},
	}
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = host.Process.Kill()
		_ = host.Wait()
	})

	forged := map[int]string{inPod: "in a container, for a pod dir no pod has", host.Process.Pid: "on the host, for the container's own pod dir"}
	for pid, what := range forged {
		var cmdline []byte
		waitFor(t, "the process forged "+what+" to run", 30*time.Second, func() bool {
			cmdline, _ = os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			return strings.HasPrefix(string(cmdline), "minicri-pause\x00pause\x00--pod\x00"+pods+"/")
		})
	}
	d.restart(t)
	for pid, what := range forged {
		if !processRunning(pid) {
			t.Errorf("the process forged %s (pid %d) was killed by the daemon's restart", what, pid)
		}
	}
	if out := d.Output(); strings.Contains(out, "orphaned pod infra process") {
		t.Errorf("the restart's sweep took a forged process for an infra process:\n%s", tail(out, 2000))
	}
	if st := d.status(t, id); st.GetState() != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the forging container is %v after the restart, want running", st.GetState())
	}
}
