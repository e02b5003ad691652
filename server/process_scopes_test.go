package server

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
)

// fakeScopes records the scopes asked for.
type fakeScopes struct {
	mu    sync.Mutex
	moves []string // "unit in slice"
}

func (f *fakeScopes) MoveToScope(_ context.Context, pid int, unit, slice, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.moves = append(f.moves, unit+" in "+slice)
	return nil
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
