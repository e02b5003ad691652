package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/fake"
)

// The whole life of a pod and its container, on the fakes: every handler's
// happy path, and the state each step leaves.
func TestPodAndContainerLifecycle(t *testing.T) {
	ts := newTestServer(t)
	podID, ctrID := ts.runningCtr(t, "web")
	if got := ts.ctrState(t, ctrID[:10]); got != runtime.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("started container is %s, want running", got)
	}
	list, err := ts.ListContainers(bg, &runtime.ListContainersRequest{Filter: &runtime.ContainerFilter{PodSandboxId: podID[:8]}})
	if err != nil || len(list.GetContainers()) != 1 {
		t.Fatalf("ListContainers of the pod = %v, %v; want the one", list.GetContainers(), err)
	}
	pods, err := ts.ListPodSandbox(bg, &runtime.ListPodSandboxRequest{})
	if err != nil || len(pods.GetItems()) != 1 {
		t.Fatalf("ListPodSandbox = %v, %v; want the one", pods.GetItems(), err)
	}

	if _, err := ts.StopContainer(bg, &runtime.StopContainerRequest{ContainerId: ctrID, Timeout: 5}); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	st, err := ts.ContainerStatus(bg, &runtime.ContainerStatusRequest{ContainerId: ctrID})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.GetStatus().GetExitCode(), int32(128+syscall.SIGTERM); got != want || st.GetStatus().GetState() != runtime.ContainerState_CONTAINER_EXITED {
		t.Errorf("stopped container: %s, exit code %d; want exited, %d", st.GetStatus().GetState(), got, want)
	}
	if kills := ts.runc.Kills(); len(kills) != 1 || kills[0] != syscall.SIGTERM {
		t.Errorf("signals sent: %v; want SIGTERM alone (the container exited on it)", kills)
	}
	if _, err := ts.StopContainer(bg, &runtime.StopContainerRequest{ContainerId: ctrID, Timeout: 5}); err != nil {
		t.Errorf("StopContainer of a stopped container: %v, want success", err)
	}

	if _, err := ts.StopPodSandbox(bg, &runtime.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if ts.network.Attached() != 0 || ts.pins.Held() != 0 {
		t.Errorf("stopped pod still holds %d attachments and %d pins", ts.network.Attached(), ts.pins.Held())
	}
	if _, err := ts.StopPodSandbox(bg, &runtime.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Errorf("StopPodSandbox again: %v, want success", err)
	}
	ps, err := ts.PodSandboxStatus(bg, &runtime.PodSandboxStatusRequest{PodSandboxId: podID})
	if err != nil || ps.GetStatus().GetState() != runtime.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("stopped pod's status = %v, %v; want not ready", ps.GetStatus().GetState(), err)
	}
	_, err = ts.CreateContainer(bg, &runtime.CreateContainerRequest{PodSandboxId: podID, Config: ctrConfig("late"), SandboxConfig: podConfig("web")})
	wantCode(t, "CreateContainer in a stopped pod", err, codes.FailedPrecondition, "not ready")

	if _, err := ts.RemovePodSandbox(bg, &runtime.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	ts.wantNothingLeft(t, "after RemovePodSandbox")
	if ts.runc.Deleted(ctrID) == 0 {
		t.Error("the container was never deleted from the runtime")
	}
	if _, err := ts.RemovePodSandbox(bg, &runtime.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Errorf("RemovePodSandbox again: %v, want success", err)
	}
	ts.runPod(t, podConfig("web")) // its name is free
}

// A container whose exit is recorded is deleted from the runtime without
// --force, which runc follows with a wait; one the runtime still sees
// running is deleted with it, so its removal does not stop there.
func TestRemoveDeletesAnExitedContainerWithoutForce(t *testing.T) {
	for _, c := range []struct {
		name        string
		stillRuns   bool
		wantDeletes int
		wantForced  int
	}{
		{"exited", false, 1, 0},
		{"the runtime still runs it", true, 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := newTestServer(t)
			_, id := ts.runningCtr(t, "web")
			if _, err := ts.StopContainer(bg, &runtime.StopContainerRequest{ContainerId: id, Timeout: 5}); err != nil {
				t.Fatalf("StopContainer: %v", err)
			}
			ts.waitExited(t, id)
			if c.stillRuns {
				_ = ts.runc.Start(bg, id)
			}
			if _, err := ts.RemoveContainer(bg, &runtime.RemoveContainerRequest{ContainerId: id}); err != nil {
				t.Fatalf("RemoveContainer: %v", err)
			}
			if got, forced := ts.runc.Deleted(id), ts.runc.Forced(id); got != c.wantDeletes || forced != c.wantForced {
				t.Errorf("runtime deletes %d, of them forced %d; want %d and %d", got, forced, c.wantDeletes, c.wantForced)
			}
		})
	}
}

func TestCreateContainerRefusals(t *testing.T) {
	ts := newTestServer(t)
	pod := podConfig("web")
	podID := ts.runPod(t, pod)
	noImage := ctrConfig("app")
	noImage.Image = nil
	unknownImage := ctrConfig("app")
	unknownImage.Image.Image = "quay.io/nothing:here"
	cases := []struct {
		name  string
		req   *runtime.CreateContainerRequest
		want  codes.Code
		names []string
	}{
		{"no config", &runtime.CreateContainerRequest{PodSandboxId: podID, SandboxConfig: pod}, codes.InvalidArgument, []string{"config"}},
		{"no image", &runtime.CreateContainerRequest{PodSandboxId: podID, Config: noImage, SandboxConfig: pod}, codes.InvalidArgument, []string{"image"}},
		{"no pod ID", &runtime.CreateContainerRequest{Config: ctrConfig("app"), SandboxConfig: pod}, codes.InvalidArgument, []string{"pod_sandbox_id"}},
		{"unknown pod", &runtime.CreateContainerRequest{PodSandboxId: "feed", Config: ctrConfig("app"), SandboxConfig: pod}, codes.NotFound, []string{"feed"}},
		{"unknown image", &runtime.CreateContainerRequest{PodSandboxId: podID, Config: unknownImage, SandboxConfig: pod}, codes.NotFound, []string{"quay.io/nothing:here"}},
	}
	for _, c := range cases {
		_, err := ts.CreateContainer(bg, c.req)
		wantCode(t, c.name, err, c.want, c.names...)
	}
	id := ts.createCtr(t, podID, pod, ctrConfig("app"))
	_, err := ts.CreateContainer(bg, &runtime.CreateContainerRequest{PodSandboxId: podID, Config: ctrConfig("app"), SandboxConfig: pod})
	wantCode(t, "the same container again", err, codes.AlreadyExists, id)
	if got := ts.ctrState(t, id); got != runtime.ContainerState_CONTAINER_CREATED {
		t.Errorf("created container is %s", got)
	}
	// The image is in use now.
	_, err = ts.RemoveImage(bg, &runtime.RemoveImageRequest{Image: &runtime.ImageSpec{Image: ts.busybox.ID}})
	wantCode(t, "RemoveImage of an image in use", err, codes.FailedPrecondition)
}

// A failed create leaves no record, root filesystem, bundle or monitor, and
// frees the name for the kubelet's retry.
func TestCreateContainerUndoesWhatItMadeOnFailure(t *testing.T) {
	for _, c := range []struct {
		step string
		fail func(ts *testServer, err error)
	}{
		{"prepare rootfs", func(ts *testServer, err error) { ts.images.Fail("PrepareRootfs", err) }},
		{"mount rootfs", func(ts *testServer, err error) { ts.images.Fail("MountRootfs", err) }},
		{"start monitor", func(ts *testServer, err error) { ts.monitor.Fail("Create", err) }},
	} {
		t.Run(c.step, func(t *testing.T) {
			ts := newTestServer(t)
			pod := podConfig("web")
			podID := ts.runPod(t, pod)
			c.fail(ts, fake.ErrInjected)
			_, err := ts.CreateContainer(bg, &runtime.CreateContainerRequest{PodSandboxId: podID, Config: ctrConfig("app"), SandboxConfig: pod})
			wantCode(t, "CreateContainer", err, codes.Internal, fake.ErrInjected.Error())
			if n := len(ts.containers.List()); n != 0 {
				t.Errorf("%d container records left", n)
			}
			if r := ts.images.Rootfses(); len(r) != 0 {
				t.Errorf("root filesystems left: %v", r)
			}
			if ids := idDirs(ts.cfg.RunDir + "/containers"); len(ids) != 0 {
				t.Errorf("bundles left: %v", ids)
			}
			if ts.monitor.Serving() != 0 {
				t.Errorf("%d monitors left", ts.monitor.Serving())
			}
			if n, _ := ts.objectCount(); n != 0 {
				t.Errorf("%d container objects left", n)
			}
			c.fail(ts, nil)
			ts.createCtr(t, podID, pod, ctrConfig("app"))
		})
	}
}

// A create is judged by its pod's namespace policy under the name the user
// asked for; a refusal is FailedPrecondition and makes nothing.
func TestCreateContainerJudgedByNamespacePolicy(t *testing.T) {
	ts := newTestServer(t)
	pod := podConfig("web")
	podID := ts.runPod(t, pod)
	refusal := &image.PolicyError{Image: "docker.io/library/busybox:latest", File: "/etc/minicri/policies/default.json", Scope: "default", Reason: "the policy rejects every image of this scope"}
	ts.images.Fail("Admit", refusal)
	cfg := ctrConfig("app")
	cfg.Image.UserSpecifiedImage = "busybox"
	_, err := ts.CreateContainer(bg, &runtime.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: pod})
	wantCode(t, "CreateContainer refused by the policy", err, codes.FailedPrecondition, refusal.File, refusal.Image)
	if n := len(ts.containers.List()); n != 0 || len(ts.images.Rootfses()) != 0 {
		t.Errorf("a refused create left %d records and root filesystems %v", n, ts.images.Rootfses())
	}
	if got, want := ts.images.Admits(), []string{pod.GetMetadata().GetNamespace() + "/busybox"}; !slices.Equal(got, want) {
		t.Errorf("Admit asked for %q, want %q (the pod's namespace, the name the user gave)", got, want)
	}
	ts.images.Fail("Admit", nil)
	ts.createCtr(t, podID, pod, cfg)
}

func TestStartContainer(t *testing.T) {
	ts := newTestServer(t)
	pod := podConfig("web")
	podID := ts.runPod(t, pod)
	id := ts.createCtr(t, podID, pod, ctrConfig("app"))

	ts.runc.Fail("Start", errors.New("runc start: exec format error"))
	_, err := ts.StartContainer(bg, &runtime.StartContainerRequest{ContainerId: id})
	wantCode(t, "StartContainer when runc fails", err, codes.Internal, "exec format error")
	if got := ts.ctrState(t, id); got != runtime.ContainerState_CONTAINER_CREATED {
		t.Errorf("after a failed start the container is %s, want still created", got)
	}
	ts.runc.Fail("Start", nil)
	if _, err := ts.StartContainer(bg, &runtime.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	_, err = ts.StartContainer(bg, &runtime.StartContainerRequest{ContainerId: id})
	wantCode(t, "StartContainer twice", err, codes.FailedPrecondition, "running")
	_, err = ts.StartContainer(bg, &runtime.StartContainerRequest{ContainerId: "0000"})
	wantCode(t, "StartContainer of an unknown ID", err, codes.NotFound)
}

// A monitor that dies without an exit file leaves a container that is
// killed and recorded as failed.
func TestMonitorDeathRecordsTheContainerFailed(t *testing.T) {
	ts := newTestServer(t)
	_, id := ts.runningCtr(t, "web")
	ts.monitor.Die(id)
	ts.waitExited(t, id)
	st, err := ts.ContainerStatus(bg, &runtime.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetStatus().GetState() != runtime.ContainerState_CONTAINER_EXITED || st.GetStatus().GetReason() != "Error" ||
		st.GetStatus().GetExitCode() != 128+int32(syscall.SIGKILL) {
		t.Errorf("status = %v, want exited, Error, 137", st.GetStatus())
	}
}

// A watch that fails while the container's monitor lives (the daemon out
// of descriptors) is the daemon's failure, not the container's: it is tried
// again, and the container keeps running. Only a monitor that is gone gets
// the container killed and recorded as failed.
func TestWatchFailureKillsOnlyWhenTheMonitorIsGone(t *testing.T) {
	for _, c := range []struct {
		name         string
		monitorAlive bool
	}{
		{"monitor alive", true},
		{"monitor gone", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := newTestServer(t)
			ts.hooks = Hooks{
				ProcessAlive:    func(int, uint64) bool { return c.monitorAlive },
				WatchRetryFirst: time.Millisecond, WatchRetryMax: 5 * time.Millisecond,
			}
			ts.monitor.Fail("WatchContainer", syscall.EMFILE)
			pod := podConfig("web")
			id := ts.createCtr(t, ts.runPod(t, pod), pod, ctrConfig("app"))
			if !c.monitorAlive {
				ts.waitExited(t, id)
				if kills := ts.runc.Kills(); len(kills) == 0 || kills[len(kills)-1] != syscall.SIGKILL {
					t.Errorf("signals = %v, want the orphan's SIGKILL", kills)
				}
				return
			}
			if _, err := ts.StartContainer(bg, &runtime.StartContainerRequest{ContainerId: id}); err != nil {
				t.Fatalf("StartContainer while the watch fails: %v", err)
			}
			waitFor(t, "three tries of the watch", func() bool { return ts.monitor.WatchCalls() >= 3 })
			if got := ts.ctrState(t, id); got != runtime.ContainerState_CONTAINER_RUNNING {
				t.Fatalf("after failed watches of a live monitor the container is %s, want running", got)
			}
			if kills := ts.runc.Kills(); len(kills) != 0 {
				t.Fatalf("signals = %v after failed watches of a live monitor, want none", kills)
			}
			// The watch comes back, and sees the container's own exit.
			ts.monitor.Fail("WatchContainer", nil)
			tries := ts.monitor.WatchCalls()
			waitFor(t, "a try after the failures ended", func() bool { return ts.monitor.WatchCalls() > tries })
			if err := ts.monitor.Exit(id, 3); err != nil {
				t.Fatal(err)
			}
			ts.waitExited(t, id)
			st, err := ts.ContainerStatus(bg, &runtime.ContainerStatusRequest{ContainerId: id})
			if err != nil {
				t.Fatal(err)
			}
			if st.GetStatus().GetExitCode() != 3 {
				t.Errorf("exit code %d, want the container's own 3", st.GetStatus().GetExitCode())
			}
		})
	}
}

func TestRemoveContainerKillsARunningOne(t *testing.T) {
	ts := newTestServer(t)
	podID, id := ts.runningCtr(t, "web")
	if _, err := ts.RemoveContainer(bg, &runtime.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	if kills := ts.runc.Kills(); len(kills) == 0 || kills[len(kills)-1] != syscall.SIGKILL {
		t.Errorf("signals = %v, want a SIGKILL", kills)
	}
	_, err := ts.ContainerStatus(bg, &runtime.ContainerStatusRequest{ContainerId: id})
	wantCode(t, "ContainerStatus after removal", err, codes.NotFound)
	if r := ts.images.Rootfses(); len(r) != 0 {
		t.Errorf("root filesystems left: %v", r)
	}
	if _, err := os.Stat(ts.cfg.RunDir + "/containers/" + id); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bundle left: %v", err)
	}
	ts.createCtr(t, podID, podConfig("web"), ctrConfig("app")) // the name is free
}

// A RemoveContainer whose runtime delete fails keeps the record, so that
// the kubelet's retry finds something to finish.
func TestRemoveContainerKeepsTheRecordWhenDeleteFails(t *testing.T) {
	ts := newTestServer(t)
	_, id := ts.runningCtr(t, "web")
	ts.runc.Fail("Delete", fake.ErrInjected)
	_, err := ts.RemoveContainer(bg, &runtime.RemoveContainerRequest{ContainerId: id})
	wantCode(t, "RemoveContainer", err, codes.Internal, fake.ErrInjected.Error())
	if got := ts.ctrState(t, id); got != runtime.ContainerState_CONTAINER_EXITED {
		t.Errorf("container is %s, want exited and still listed", got)
	}
	ts.runc.Fail("Delete", nil)
	if _, err := ts.RemoveContainer(bg, &runtime.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("RemoveContainer retry: %v", err)
	}
}

func TestStopPodSandboxReportsATeardownFailureAndRetries(t *testing.T) {
	ts := newTestServer(t)
	podID, id := ts.runningCtr(t, "web")
	ts.network.Fail("Teardown", fake.ErrInjected)
	_, err := ts.StopPodSandbox(bg, &runtime.StopPodSandboxRequest{PodSandboxId: podID})
	wantCode(t, "StopPodSandbox", err, codes.Internal, fake.ErrInjected.Error())
	if got := ts.ctrState(t, id); got != runtime.ContainerState_CONTAINER_EXITED {
		t.Errorf("container is %s, want exited: the containers stop first", got)
	}
	ts.network.Fail("Teardown", nil)
	if _, err := ts.StopPodSandbox(bg, &runtime.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("StopPodSandbox retry: %v", err)
	}
	if ts.network.Attached() != 0 {
		t.Error("the pod is still attached")
	}
}

func TestSharedPIDPodHasAnInfraProcessUntilStopped(t *testing.T) {
	ts := newTestServer(t)
	cfg := podConfig("web")
	cfg.Linux.SecurityContext.NamespaceOptions.Pid = runtime.NamespaceMode_POD
	id := ts.runPod(t, cfg)
	if ts.monitor.Infras() != 1 {
		t.Fatalf("%d infra processes, want 1", ts.monitor.Infras())
	}
	if _, err := ts.StopPodSandbox(bg, &runtime.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if ts.monitor.Infras() != 0 {
		t.Fatalf("%d infra processes after the stop, want 0", ts.monitor.Infras())
	}
}

// A container with PID mode TARGET joins the PID namespace of a running
// container of its own pod, and nothing else.
func TestCreateContainerTargetPIDNamespace(t *testing.T) {
	ts := newTestServer(t)
	pod := podConfig("web")
	podID := ts.runPod(t, pod)
	target := ts.createCtr(t, podID, pod, ctrConfig("app"))
	_, otherPods := ts.runningCtr(t, "other")
	debug := func(name, targetID string) *runtime.ContainerConfig {
		c := ctrConfig(name)
		c.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
			NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_TARGET, TargetId: targetID}}}
		return c
	}
	const field = "target_id"
	for _, c := range []struct {
		name     string
		targetID string
		want     codes.Code
	}{
		{"no target", "", codes.InvalidArgument},
		{"unknown target", "feedbeef", codes.NotFound},
		{"target in another pod", otherPods, codes.InvalidArgument},
		{"target not started", target, codes.FailedPrecondition},
	} {
		_, err := ts.CreateContainer(bg, &runtime.CreateContainerRequest{PodSandboxId: podID, Config: debug("debug", c.targetID), SandboxConfig: pod})
		wantCode(t, c.name, err, c.want, field)
	}
	if _, err := ts.StartContainer(bg, &runtime.StartContainerRequest{ContainerId: target}); err != nil {
		t.Fatal(err)
	}
	id := ts.createCtr(t, podID, pod, debug("debug", target[:12]))
	spec, err := oci.ReadSpec(filepath.Join(ts.cfg.RunDir, "containers", id))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("/proc/%d/ns/pid", os.Getpid()) // the fake runtime's pid of every container
	found := false
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.PIDNamespace {
			found = ns.Path == want
		}
	}
	if !found {
		t.Errorf("namespaces of the debug container = %+v, want the PID one at %s", spec.Linux.Namespaces, want)
	}
}

// A shared monitor's join begins before the bundle is written: a bundle
// that fails gives the join up (its helper removes what it made), and the
// monitor's place goes to the next container.
func TestCreateContainerCancelsTheJoinOfAFailedBundle(t *testing.T) {
	ts := newTestServer(t, func(c *config.Config) { c.Runtime.MonitorShare = 2 })
	pod := podConfig("web")
	podID := ts.runPod(t, pod)
	first := ts.createCtr(t, podID, pod, ctrConfig("a"))
	ts.images.Fail("MountRootfs", fake.ErrInjected)
	_, err := ts.CreateContainer(bg, &runtime.CreateContainerRequest{PodSandboxId: podID, Config: ctrConfig("b"), SandboxConfig: pod})
	wantCode(t, "CreateContainer whose rootfs fails to mount", err, codes.Internal, fake.ErrInjected.Error())
	if n := ts.monitor.Cancels(); n != 1 {
		t.Errorf("%d joins given up after the bundle failed, want 1", n)
	}
	ts.images.Fail("MountRootfs", nil)
	second := ts.createCtr(t, podID, pod, ctrConfig("b"))
	a, _ := ts.containers.Get(first)
	b, _ := ts.containers.Get(second)
	if a.Monitor.PID != b.Monitor.PID {
		t.Errorf("monitors %d and %d: the failed create kept the shared monitor's last place", a.Monitor.PID, b.Monitor.PID)
	}
	if n := ts.monitor.Cancels(); n != 1 {
		t.Errorf("%d joins given up after a create that succeeded, want still 1", n)
	}
}

// With monitor_share, a pod's containers share a monitor; a monitor that
// refuses a join is not asked again: a new one starts and takes the next.
func TestCreateContainerSharesMonitors(t *testing.T) {
	ts := newTestServer(t, func(c *config.Config) { c.Runtime.MonitorShare = 8 })
	pod := podConfig("web")
	podID := ts.runPod(t, pod)
	monitorOf := func(id string) int {
		t.Helper()
		rec, err := ts.containers.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Monitor.PID
	}
	first := ts.createCtr(t, podID, pod, ctrConfig("a"))
	second := ts.createCtr(t, podID, pod, ctrConfig("b"))
	if monitorOf(first) != monitorOf(second) {
		t.Errorf("monitors %d and %d; want the pod's containers in one", monitorOf(first), monitorOf(second))
	}
	ts.monitor.Fail("Join", conmon.ErrJoinRefused)
	third := ts.createCtr(t, podID, pod, ctrConfig("c"))
	ts.monitor.Fail("Join", nil)
	fourth := ts.createCtr(t, podID, pod, ctrConfig("d"))
	if monitorOf(third) == monitorOf(first) || monitorOf(fourth) != monitorOf(third) {
		t.Errorf("monitors %d, %d after a refused join; want a new one, shared by both", monitorOf(third), monitorOf(fourth))
	}
	ts.monitor.Fail("Join", fake.ErrInjected)
	_, err := ts.CreateContainer(bg, &runtime.CreateContainerRequest{PodSandboxId: podID, Config: ctrConfig("e"), SandboxConfig: pod})
	wantCode(t, "a failed join", err, codes.Internal, fake.ErrInjected.Error())
}
