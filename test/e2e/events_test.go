//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// eventWatch is a GetContainerEvents stream opened with the kubelet's CRI
// client, as its evented PLEG opens it.
type eventWatch struct {
	ch chan *runtime.ContainerEventResponse
}

func (d *Daemon) watchEvents(t *testing.T) *eventWatch {
	t.Helper()
	w := &eventWatch{ch: make(chan *runtime.ContainerEventResponse, 1000)}
	ctx, cancel := context.WithCancel(context.Background())
	connected := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		ended <- d.Runtime.GetContainerEvents(ctx, w.ch, func(runtime.RuntimeService_GetContainerEventsClient) { close(connected) })
	}()
	t.Cleanup(func() {
		cancel()
		// The client blocks on a full channel, whatever its context says.
		for {
			select {
			case <-ended:
				return
			case <-w.ch:
			case <-time.After(10 * time.Second):
				t.Errorf("GetContainerEvents did not return after its context ended")
				return
			}
		}
	})
	select {
	case <-connected:
	case err := <-ended:
		t.Fatalf("GetContainerEvents: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("GetContainerEvents not connected after 10s")
	}
	return w
}

// next returns the next event about one of ids, skipping the others.
func (w *eventWatch) next(t *testing.T, ids ...string) *runtime.ContainerEventResponse {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-w.ch:
			for _, id := range ids {
				if ev.GetContainerId() == id {
					return ev
				}
			}
		case <-timeout:
			t.Fatalf("no event about %v within 30s", ids)
			return nil
		}
	}
}

func TestGetContainerEventsStreamsPodLifecycle(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	hostNet := &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE}}
	w := d.watchEvents(t)

	// The client is connected once the stream is open, which may be a moment
	// before the daemon has subscribed it: a first pod's STARTED shows the
	// subscription is live.
	warm := d.podConfig("warm-up")
	warm.Linux.SecurityContext = hostNet
	warmID := d.runPod(t, warm)
	w.next(t, warmID)

	ctx := context.Background()
	podCfg := d.podConfig("events")
	podCfg.Linux.SecurityContext = hostNet
	pod := d.runPod(t, podCfg)
	sleeper := d.startContainer(t, pod, podCfg, containerConfig("sleeper", ref, "sleep", "600"))
	if err := d.Runtime.StopContainer(ctx, sleeper, 1); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	// A container that ends on its own, not through StopContainer.
	quitter := d.startContainer(t, pod, podCfg, containerConfig("quitter", ref, "sh", "-c", "exit 3"))
	d.waitExited(t, quitter, 30*time.Second)
	if err := d.Runtime.RemoveContainer(ctx, sleeper); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	if err := d.Runtime.StopPodSandbox(ctx, pod); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if err := d.Runtime.RemovePodSandbox(ctx, pod); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}

	const (
		created = runtime.ContainerEventType_CONTAINER_CREATED_EVENT
		started = runtime.ContainerEventType_CONTAINER_STARTED_EVENT
		stopped = runtime.ContainerEventType_CONTAINER_STOPPED_EVENT
		deleted = runtime.ContainerEventType_CONTAINER_DELETED_EVENT
	)
	// As containerd: the sandbox's own events carry its ID as container_id.
	want := []struct {
		id  string
		typ runtime.ContainerEventType
	}{
		{pod, created}, {pod, started},
		{sleeper, created}, {sleeper, started}, {sleeper, stopped},
		{quitter, created}, {quitter, started}, {quitter, stopped},
		{sleeper, deleted},
		{pod, stopped},
		{quitter, deleted}, {pod, deleted},
	}
	name := map[string]string{pod: "pod", sleeper: "sleeper", quitter: "quitter"}
	var got []string
	for i, w8 := range want {
		ev := w.next(t, pod, sleeper, quitter)
		got = append(got, fmt.Sprintf("%s %v", name[ev.GetContainerId()], ev.GetContainerEventType()))
		if ev.GetContainerId() != w8.id || ev.GetContainerEventType() != w8.typ {
			t.Fatalf("event %d = %s, want %s %v; so far:\n  %s", i, got[i], name[w8.id], w8.typ, strings.Join(got, "\n  "))
		}
		// The kubelet drops an event without the pod's metadata.
		if ev.GetPodSandboxStatus().GetMetadata().GetUid() != podCfg.GetMetadata().GetUid() || ev.GetPodSandboxStatus().GetId() != pod {
			t.Errorf("event %d (%s): pod_sandbox_status = %v, want pod %s", i, got[i], ev.GetPodSandboxStatus(), pod)
		}
		if ev.GetCreatedAt() == 0 {
			t.Errorf("event %d (%s) has no created_at", i, got[i])
		}
		if w8.id == quitter && w8.typ == stopped {
			var found bool
			for _, st := range ev.GetContainersStatuses() {
				if st.GetId() == quitter {
					found = true
					if st.GetState() != runtime.ContainerState_CONTAINER_EXITED || st.GetExitCode() != 3 {
						t.Errorf("quitter's status in its STOPPED event: %v exit %d, want EXITED 3", st.GetState(), st.GetExitCode())
					}
				}
			}
			if !found {
				t.Errorf("quitter's STOPPED event lacks its status: %v", ev.GetContainersStatuses())
			}
		}
	}
}
