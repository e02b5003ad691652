package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/conmon"
)

// fakeScopes records the scopes asked for and those stopped.
type fakeScopes struct {
	mu     sync.Mutex
	moves  []string // "unit in slice"
	stops  []string
	onStop func(unit string) // when set, runs as a scope is stopped
}

func (f *fakeScopes) MoveToScope(_ context.Context, pid int, unit, slice, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.moves = append(f.moves, unit+" in "+slice)
	return nil
}

func (f *fakeScopes) StopScope(_ context.Context, unit string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stops = append(f.stops, unit)
	if f.onStop != nil {
		f.onStop(unit)
	}
	return nil
}

func (f *fakeScopes) stopped() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.stops)
}

// Under the systemd driver a pod's infra process goes to a scope of its own
// in the pod's slice (from the kubelet's slice path) and a container's
// monitor to one in system.slice: neither stays in minicri.service's cgroup,
// where the Debian 12 guest found them. Under cgroupfs nothing moves.
func TestInfraAndMonitorsLeaveTheDaemonsCgroup(t *testing.T) {
	const slicePath = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poduid1.slice"
	for _, c := range []struct {
		driver string
		want   func(podID, ctrID string) []string
	}{
		{"systemd", func(podID, ctrID string) []string {
			return []string{"minicri-pause-" + podID + ".scope in kubepods-besteffort-poduid1.slice", "minicri-conmon-" + ctrID + ".scope in system.slice"}
		}},
		{"cgroupfs", func(string, string) []string { return nil }},
	} {
		t.Run(c.driver, func(t *testing.T) {
			ts := newTestServer(t, func(cfg *config.Config) { cfg.CgroupDriver = c.driver })
			ts.hooks.ProcessAlive = func(int, uint64) bool { return true } // the fakes' pids are not processes
			scopes := &fakeScopes{}
			if c.driver == "systemd" {
				ts.scopes = scopes
			}
			pod := podConfig("web")
			pod.Linux.SecurityContext.NamespaceOptions.Pid = runtime.NamespaceMode_POD
			if c.driver == "systemd" {
				pod.Linux.CgroupParent = slicePath
			}
			podID := ts.runPod(t, pod)
			ctrID := ts.createCtr(t, podID, pod, ctrConfig("app"))
			if want := c.want(podID, ctrID); !slices.Equal(scopes.moves, want) {
				t.Errorf("scopes %q, want %q", scopes.moves, want)
			}
		})
	}
}

// Under the systemd driver a pod whose cgroup parent is not a slice, or not
// where systemd puts the slice it names, is refused at RunPodSandbox.
func TestRunPodSandboxRefusesANonSliceParentUnderSystemd(t *testing.T) {
	ts := newTestServer(t, func(cfg *config.Config) { cfg.CgroupDriver = "systemd" })
	for _, parent := range []string{"/kubepods/besteffort/pod1", "/system.slice/kubepods-pod1.slice", "/kubepods.slice/../x.slice"} {
		pod := podConfig("web")
		pod.Linux.CgroupParent = parent
		_, err := ts.RunPodSandbox(bg, &runtime.RunPodSandboxRequest{Config: pod})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "config.linux.cgroup_parent") {
			t.Errorf("cgroup parent %q: %v, want InvalidArgument naming config.linux.cgroup_parent", parent, err)
		}
	}
}

// Under the systemd driver minicri stops the scopes of its own processes
// once it has ended them: the infra process's when its pod stops, a
// monitor's once the monitor is gone after its last container, whether it
// was shared (monitor_share 8) or served one container (1). systemd
// before 249 (Debian 11's 247) misses a scope's cgroup running empty during
// a daemon-reload, and the Debian 11 guest found a pod's
// minicri-pause-POD.scope "active (running)", empty, after the pod was
// removed.
func TestScopesOfEndedProcessesAreStopped(t *testing.T) {
	for _, share := range []int{8, 1} {
		t.Run(fmt.Sprintf("monitor_share=%d", share), func(t *testing.T) { scopesOfEndedProcessesAreStopped(t, share) })
	}
}

func scopesOfEndedProcessesAreStopped(t *testing.T, monitorShare int) {
	ts := newTestServer(t, func(cfg *config.Config) {
		cfg.CgroupDriver = "systemd"
		cfg.Runtime.MonitorShare = monitorShare
	})
	ts.hooks.ProcessAlive = func(int, uint64) bool { return true } // the fakes' pids are not processes
	scopes := &fakeScopes{}
	ts.scopes = scopes
	var mu sync.Mutex
	infraStopped, stoppedWhileRunning := false, ""
	ts.monitor.OnStopPause = func(conmon.Infra) { mu.Lock(); infraStopped = true; mu.Unlock() }
	scopes.onStop = func(unit string) {
		mu.Lock()
		defer mu.Unlock()
		if !infraStopped && strings.HasPrefix(unit, "minicri-pause-") {
			stoppedWhileRunning = unit
		}
	}

	pod := podConfig("web")
	pod.Linux.SecurityContext.NamespaceOptions.Pid = runtime.NamespaceMode_POD
	pod.Linux.CgroupParent = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poduid1.slice"
	podID := ts.runPod(t, pod)
	ctrID := ts.createCtr(t, podID, pod, ctrConfig("app"))
	if _, err := ts.StartContainer(bg, &runtime.StartContainerRequest{ContainerId: ctrID}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	if got := scopes.stopped(); len(got) != 0 {
		t.Fatalf("scopes stopped while the pod runs: %q", got)
	}
	if _, err := ts.StopPodSandbox(bg, &runtime.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	ts.waitExited(t, ctrID)
	got := scopes.stopped()
	for _, want := range []string{"minicri-pause-" + podID + ".scope", monitorScope(ctrID)} {
		if !slices.Contains(got, want) {
			t.Errorf("scopes stopped %q, want %s among them", got, want)
		}
	}
	mu.Lock()
	early := stoppedWhileRunning
	mu.Unlock()
	if early != "" {
		t.Errorf("%s stopped before the infra process was", early)
	}
	if _, err := ts.RemovePodSandbox(bg, &runtime.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	ts.wantNothingLeft(t, "after RemovePodSandbox")
}
