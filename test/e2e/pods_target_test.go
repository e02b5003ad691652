//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// privatePIDPod is a host-network pod whose containers each get a PID
// namespace of their own, as the kubelet asks for a pod without
// shareProcessNamespace.
func (d *Daemon) privatePIDPod(name string) *runtime.PodSandboxConfig {
	cfg := d.podConfig(name)
	cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{
		Network: runtime.NamespaceMode_NODE, Pid: runtime.NamespaceMode_CONTAINER}}
	return cfg
}

// withPIDMode sets a container's PID namespace mode (and target).
func withPIDMode(cfg *runtime.ContainerConfig, mode runtime.NamespaceMode, target string) *runtime.ContainerConfig {
	cfg.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
		NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE, Pid: mode, TargetId: target}}}
	return cfg
}

// A container with PID mode TARGET (kubectl debug --target) sees the
// target container's processes, and ends when the target does.
func TestPIDNamespaceTargetJoinsTarget(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.privatePIDPod("target")
	pod := d.runPod(t, podCfg)
	target := d.startContainer(t, pod, podCfg, withPIDMode(containerConfig("app", ref, "sleep", "300"), runtime.NamespaceMode_CONTAINER, ""))

	st, log := d.runToExit(t, pod, podCfg, withPIDMode(containerConfig("debug", ref, "sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline"), runtime.NamespaceMode_TARGET, target))
	if st.GetExitCode() != 0 || !strings.Contains(log, "sleep 300") {
		t.Fatalf("debug container: exit %d, PID 1 is %q; want the target's sleep 300", st.GetExitCode(), log)
	}

	debug := d.startContainer(t, pod, podCfg, withPIDMode(containerConfig("debug2", ref, "sleep", "300"), runtime.NamespaceMode_TARGET, target))
	if err := d.Runtime.StopContainer(context.Background(), target, 0); err != nil {
		t.Fatalf("StopContainer target: %v", err)
	}
	// The kernel kills a PID namespace's processes when its init exits.
	if st := d.waitExited(t, debug, 30*time.Second); st.GetExitCode() != 137 {
		t.Errorf("debug container ended with exit code %d after its target stopped, want 137 (SIGKILL)", st.GetExitCode())
	}
}

func TestPIDNamespaceTargetRefusals(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.privatePIDPod("target")
	pod := d.runPod(t, podCfg)
	otherCfg := d.privatePIDPod("other")
	other := d.runPod(t, otherCfg)
	created := d.createContainer(t, pod, podCfg, withPIDMode(containerConfig("created", ref, "sleep", "300"), runtime.NamespaceMode_CONTAINER, ""))
	exited := d.startContainer(t, pod, podCfg, withPIDMode(containerConfig("exited", ref, "true"), runtime.NamespaceMode_CONTAINER, ""))
	d.waitExited(t, exited, 30*time.Second)
	elsewhere := d.startContainer(t, other, otherCfg, withPIDMode(containerConfig("elsewhere", ref, "sleep", "300"), runtime.NamespaceMode_CONTAINER, ""))

	for i, c := range []struct {
		name   string
		target string
		code   codes.Code
	}{
		{"no target", "", codes.InvalidArgument},
		{"unknown target", randomHex(32), codes.NotFound},
		{"target not started", created, codes.FailedPrecondition},
		{"target exited", exited, codes.FailedPrecondition},
		{"target in another pod", elsewhere, codes.InvalidArgument},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := withPIDMode(containerConfig("debug"+string(rune('a'+i)), ref, "true"), runtime.NamespaceMode_TARGET, c.target)
			_, err := d.Runtime.CreateContainer(context.Background(), pod, cfg, podCfg)
			if status.Code(err) != c.code || !strings.Contains(err.Error(), "target_id") {
				t.Fatalf("CreateContainer: %v; want %v naming target_id", err, c.code)
			}
		})
	}
	resp, err := d.Runtime.ListContainers(context.Background(), &runtime.ContainerFilter{PodSandboxId: pod})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp) != 2 {
		t.Errorf("pod has %d containers after the refused creates, want the 2 made before", len(resp))
	}
}
