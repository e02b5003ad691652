package server

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/server/internal/fake"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

func TestImageHandlers(t *testing.T) {
	ts := newTestServer(t)
	for _, c := range []struct {
		name string
		req  *runtime.PullImageRequest
		want codes.Code
		in   string
	}{
		{"no image", &runtime.PullImageRequest{}, codes.InvalidArgument, "image.image"},
		{"unknown handler", &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: "nginx:1", RuntimeHandler: "kata"}}, codes.InvalidArgument, "image.runtime_handler"},
		// The namespace picks a signature_policy_dir file: never a path.
		{"namespace that walks up", nsPull("../../etc/x"), codes.InvalidArgument, "sandbox_config.metadata.namespace"},
		{"namespace with a slash", nsPull("a/b"), codes.InvalidArgument, "sandbox_config.metadata.namespace"},
		{"namespace not a label", nsPull("Team_A"), codes.InvalidArgument, "sandbox_config.metadata.namespace"},
	} {
		_, err := ts.PullImage(bg, c.req)
		wantCode(t, c.name, err, c.want, c.in)
	}
	pulled, err := ts.PullImage(bg, &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: "docker.io/library/nginx:1"}, Auth: &runtime.AuthConfig{Username: "u", Password: "p"}})
	if err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	ts.images.Fail("Pull", fake.ErrInjected)
	_, err = ts.PullImage(bg, &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: "docker.io/library/redis:7"}})
	wantCode(t, "a pull that fails for no known reason", err, codes.Unknown, "redis")
	ts.images.Fail("Pull", &image.PolicyError{Image: "docker.io/library/redis:7", File: "/etc/minicri/policy.json", Scope: "default", Reason: "a signature was required, but no signature exists"})
	_, err = ts.PullImage(bg, &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: "docker.io/library/redis:7"}})
	wantCode(t, "a pull the signature policy refuses", err, codes.FailedPrecondition, "scope default")
	ts.images.Fail("Pull", nil)

	list, err := ts.ListImages(bg, &runtime.ListImagesRequest{})
	if err != nil || len(list.GetImages()) != 2 {
		t.Fatalf("ListImages = %d images, %v; want 2", len(list.GetImages()), err)
	}
	list, err = ts.ListImages(bg, &runtime.ListImagesRequest{Filter: &runtime.ImageFilter{Image: &runtime.ImageSpec{Image: "docker.io/library/nginx:1"}}})
	if err != nil || len(list.GetImages()) != 1 || list.GetImages()[0].GetId() != pulled.GetImageRef() {
		t.Fatalf("ListImages(nginx) = %v, %v; want the pulled one", list.GetImages(), err)
	}
	st, err := ts.ImageStatus(bg, &runtime.ImageStatusRequest{Image: &runtime.ImageSpec{Image: pulled.GetImageRef()}, Verbose: true})
	if err != nil || st.GetImage().GetId() != pulled.GetImageRef() {
		t.Fatalf("ImageStatus = %v, %v", st.GetImage(), err)
	}
	// An image that is not there is no error, as the CRI says: no image.
	st, err = ts.ImageStatus(bg, &runtime.ImageStatusRequest{Image: &runtime.ImageSpec{Image: "docker.io/library/none:1"}})
	if err != nil || st.GetImage() != nil {
		t.Fatalf("ImageStatus of a missing image = %v, %v; want none and no error", st.GetImage(), err)
	}
	fs, err := ts.ImageFsInfo(bg, &runtime.ImageFsInfoRequest{})
	if err != nil || len(fs.GetImageFilesystems()) == 0 {
		t.Fatalf("ImageFsInfo = %v, %v", fs, err)
	}
	ts.images.Fail("FsInfo", fake.ErrInjected)
	_, err = ts.ImageFsInfo(bg, &runtime.ImageFsInfoRequest{})
	wantCode(t, "ImageFsInfo failing", err, codes.Internal)

	if _, err := ts.RemoveImage(bg, &runtime.RemoveImageRequest{Image: &runtime.ImageSpec{Image: pulled.GetImageRef()}}); err != nil {
		t.Fatalf("RemoveImage: %v", err)
	}
	if _, err := ts.RemoveImage(bg, &runtime.RemoveImageRequest{Image: &runtime.ImageSpec{Image: pulled.GetImageRef()}}); err != nil {
		t.Errorf("RemoveImage of a removed image: %v, want success", err)
	}
}

func TestExecSync(t *testing.T) {
	ts := newTestServer(t)
	pod := podConfig("web")
	podID := ts.runPod(t, pod)
	created := ts.createCtr(t, podID, pod, ctrConfig("idle"))
	_, running := ts.runningCtr(t, "other")
	ts.runc.ExecStdout, ts.runc.ExecCode = "hello\n", 3

	resp, err := ts.ExecSync(bg, &runtime.ExecSyncRequest{ContainerId: running[:8], Cmd: []string{"echo", "hello"}, Timeout: 5})
	if err != nil {
		t.Fatalf("ExecSync: %v", err)
	}
	if got, want := resp.GetExitCode(), int32(3); got != want || string(resp.GetStdout()) != "hello\n" {
		t.Errorf("ExecSync = exit %d, stdout %q; want %d, %q", got, resp.GetStdout(), want, "hello\n")
	}
	for _, c := range []struct {
		name string
		req  *runtime.ExecSyncRequest
		want codes.Code
		in   string
	}{
		{"no command", &runtime.ExecSyncRequest{ContainerId: running}, codes.InvalidArgument, "cmd"},
		{"negative timeout", &runtime.ExecSyncRequest{ContainerId: running, Cmd: []string{"true"}, Timeout: -1}, codes.InvalidArgument, "timeout"},
		{"not running", &runtime.ExecSyncRequest{ContainerId: created, Cmd: []string{"true"}}, codes.FailedPrecondition, created},
	} {
		_, err := ts.ExecSync(bg, c.req)
		wantCode(t, c.name, err, c.want, c.in)
	}
	ts.runc.Fail("Exec", context.DeadlineExceeded)
	_, err = ts.ExecSync(bg, &runtime.ExecSyncRequest{ContainerId: running, Cmd: []string{"sleep", "9"}, Timeout: 1})
	wantCode(t, "a timed out ExecSync", err, codes.DeadlineExceeded, "timed out")
	if n := len(ts.runc.Execs()); n != 1 {
		t.Errorf("%d execs ran, want 1: refused requests must not reach the runtime", n)
	}
}

// Exec, Attach and PortForward answer URLs on the streaming server, for a
// running container or a ready pod only.
func TestStreamingURLs(t *testing.T) {
	ts := newTestServer(t)
	podID, id := ts.runningCtr(t, "web")
	exec, err := ts.Exec(bg, &runtime.ExecRequest{ContainerId: id, Cmd: []string{"sh"}, Stdin: true, Stdout: true})
	if err != nil || !strings.Contains(exec.GetUrl(), "/exec/") {
		t.Errorf("Exec = %q, %v; want an exec URL", exec.GetUrl(), err)
	}
	attach, err := ts.Attach(bg, &runtime.AttachRequest{ContainerId: id, Stdout: true})
	if err != nil || !strings.Contains(attach.GetUrl(), "/attach/") {
		t.Errorf("Attach = %q, %v; want an attach URL", attach.GetUrl(), err)
	}
	pf, err := ts.PortForward(bg, &runtime.PortForwardRequest{PodSandboxId: podID, Port: []int32{80}})
	if err != nil || !strings.Contains(pf.GetUrl(), "/portforward/") {
		t.Errorf("PortForward = %q, %v; want a port-forward URL", pf.GetUrl(), err)
	}
	_, err = ts.Exec(bg, &runtime.ExecRequest{ContainerId: id, Cmd: []string{"sh"}})
	wantCode(t, "Exec with no stream", err, codes.InvalidArgument)
	_, err = ts.Exec(bg, &runtime.ExecRequest{ContainerId: id, Cmd: []string{"sh"}, Tty: true, Stdout: true, Stderr: true})
	wantCode(t, "Exec with tty and stderr", err, codes.InvalidArgument, "stderr")
	if _, err := ts.StopPodSandbox(bg, &runtime.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	_, err = ts.Exec(bg, &runtime.ExecRequest{ContainerId: id, Cmd: []string{"sh"}, Stdout: true})
	wantCode(t, "Exec in a stopped container", err, codes.FailedPrecondition)
	_, err = ts.PortForward(bg, &runtime.PortForwardRequest{PodSandboxId: podID, Port: []int32{80}})
	wantCode(t, "PortForward to a stopped pod", err, codes.FailedPrecondition, "not ready")
}

func TestUpdateContainerResources(t *testing.T) {
	ts := newTestServer(t)
	_, id := ts.runningCtr(t, "web")
	req := &runtime.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtime.LinuxContainerResources{CpuShares: 512, MemoryLimitInBytes: 64 << 20}}
	if _, err := ts.UpdateContainerResources(bg, req); err != nil {
		t.Fatalf("UpdateContainerResources: %v", err)
	}
	got := ts.runc.Updated(id)
	if got == nil || got.Memory == nil || *got.Memory.Limit != 64<<20 || got.CPU == nil || *got.CPU.Shares != 512 {
		t.Fatalf("runtime got %+v, want memory 64 MiB and 512 CPU shares", got)
	}
	st, err := ts.ContainerStatus(bg, &runtime.ContainerStatusRequest{ContainerId: id})
	if err != nil || st.GetStatus().GetResources().GetLinux().GetMemoryLimitInBytes() != 64<<20 {
		t.Errorf("status resources = %v, %v; want the new limit", st.GetStatus().GetResources(), err)
	}
	ts.runc.Fail("Update", fake.ErrInjected)
	_, err = ts.UpdateContainerResources(bg, req)
	wantCode(t, "a failed update", err, codes.Internal, fake.ErrInjected.Error())
	ts.runc.Fail("Update", nil)
	if _, err := ts.StopContainer(bg, &runtime.StopContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	_, err = ts.UpdateContainerResources(bg, req)
	wantCode(t, "an update of an exited container", err, codes.FailedPrecondition, "exited")
}

// Stats of a container whose cgroup is not there (the fakes make none) are
// refused or left out, never a panic; the writable layer comes from the
// image store.
func TestStatsHandlers(t *testing.T) {
	ts := newTestServer(t)
	podID, id := ts.runningCtr(t, "web")
	_, _ = ts.ContainerStats(bg, &runtime.ContainerStatsRequest{ContainerId: id})
	_, _ = ts.ListContainerStats(bg, &runtime.ListContainerStatsRequest{})
	_, _ = ts.PodSandboxStats(bg, &runtime.PodSandboxStatsRequest{PodSandboxId: podID})
	_, _ = ts.ListPodSandboxStats(bg, &runtime.ListPodSandboxStatsRequest{})
	if _, err := ts.ListPodSandboxMetrics(bg, &runtime.ListPodSandboxMetricsRequest{}); err != nil {
		t.Errorf("ListPodSandboxMetrics: %v", err)
	}
	if _, err := ts.ListMetricDescriptors(bg, &runtime.ListMetricDescriptorsRequest{}); err != nil {
		t.Errorf("ListMetricDescriptors: %v", err)
	}
	_, err := ts.ContainerStats(bg, &runtime.ContainerStatsRequest{})
	wantCode(t, "ContainerStats with no ID", err, codes.InvalidArgument, "container_id")
}

func TestVersionStatusAndRuntimeConfig(t *testing.T) {
	ts := newTestServer(t, func(c *config.Config) { c.CNI.ConfTemplate = "/etc/cni/template" })
	v, err := ts.Version(bg, &runtime.VersionRequest{})
	if err != nil || v.GetRuntimeName() != RuntimeName {
		t.Fatalf("Version = %v, %v", v, err)
	}
	conds := conditions(t, ts.Server)
	if !conds[runtime.RuntimeReady].GetStatus() || !conds[runtime.NetworkReady].GetStatus() {
		t.Errorf("conditions %v, want both ready", conds)
	}
	ts.network.Fail("Ready", fake.ErrInjected)
	if c := conditions(t, ts.Server)[runtime.NetworkReady]; c.GetStatus() || !strings.Contains(c.GetMessage(), fake.ErrInjected.Error()) {
		t.Errorf("network condition %v, want not ready with the reason", c)
	}
	rc, err := ts.RuntimeConfig(bg, &runtime.RuntimeConfigRequest{})
	if err != nil || rc.GetLinux().GetCgroupDriver() != runtime.CgroupDriver_CGROUPFS {
		t.Errorf("RuntimeConfig = %v, %v; want cgroupfs", rc, err)
	}
	_, err = ts.UpdateRuntimeConfig(bg, &runtime.UpdateRuntimeConfigRequest{RuntimeConfig: &runtime.RuntimeConfig{NetworkConfig: &runtime.NetworkConfig{PodCidr: "10.244.0.0/24"}}})
	if err != nil || ts.network.Templates != 1 {
		t.Errorf("UpdateRuntimeConfig = %v, %d templates written; want 1", err, ts.network.Templates)
	}
	_, err = ts.UpdateRuntimeConfig(bg, &runtime.UpdateRuntimeConfigRequest{RuntimeConfig: &runtime.RuntimeConfig{NetworkConfig: &runtime.NetworkConfig{PodCidr: "not-a-cidr"}}})
	wantCode(t, "UpdateRuntimeConfig with a bad CIDR", err, codes.InvalidArgument, "pod_cidr")
}

func TestReopenContainerLog(t *testing.T) {
	ts := newTestServer(t)
	pod := podConfig("web")
	podID := ts.runPod(t, pod)
	created := ts.createCtr(t, podID, pod, ctrConfig("idle"))
	_, err := ts.ReopenContainerLog(bg, &runtime.ReopenContainerLogRequest{ContainerId: created})
	wantCode(t, "ReopenContainerLog of a created container", err, codes.FailedPrecondition, "running")

	_, running := ts.runningCtr(t, "other")
	if _, err := ts.ReopenContainerLog(bg, &runtime.ReopenContainerLogRequest{ContainerId: running}); err != nil {
		t.Fatalf("ReopenContainerLog: %v", err)
	}
	bundle := filepath.Join(ts.cfg.RunDir, "containers", running)
	if n := ts.monitor.Reopens(bundle); n != 1 {
		t.Errorf("the monitor reopened the log %d times, want 1", n)
	}
	ts.monitor.Fail("ReopenLog", fake.ErrInjected)
	_, err = ts.ReopenContainerLog(bg, &runtime.ReopenContainerLogRequest{ContainerId: running})
	wantCode(t, "a failed reopen", err, codes.Internal, fake.ErrInjected.Error())
}

// A verbose status carries, for crictl inspect, the record and the config
// the kubelet sent, as JSON; a plain one carries none.
func TestVerboseStatusCarriesRecordAndConfig(t *testing.T) {
	ts := newTestServer(t)
	pod := podConfig("web")
	podID := ts.runPod(t, pod)
	ctrID := ts.createCtr(t, podID, pod, ctrConfig("app"))
	answers := map[string]func(verbose bool) (map[string]string, error){
		"PodSandboxStatus": func(verbose bool) (map[string]string, error) {
			resp, err := ts.PodSandboxStatus(bg, &runtime.PodSandboxStatusRequest{PodSandboxId: podID, Verbose: verbose})
			return resp.GetInfo(), err
		},
		"ContainerStatus": func(verbose bool) (map[string]string, error) {
			resp, err := ts.ContainerStatus(bg, &runtime.ContainerStatusRequest{ContainerId: ctrID, Verbose: verbose})
			return resp.GetInfo(), err
		},
	}
	wantIDs := map[string]string{"PodSandboxStatus": podID, "ContainerStatus": ctrID}
	wantNames := map[string]string{"PodSandboxStatus": "web", "ContainerStatus": "app"}
	for call, answer := range answers {
		if info, err := answer(false); err != nil || len(info) != 0 {
			t.Errorf("%s, not verbose = %v, %v; want no info", call, info, err)
		}
		info, err := answer(true)
		if err != nil {
			t.Fatalf("%s, verbose: %v", call, err)
		}
		var got struct {
			Record struct{ ID string }
			Config struct {
				Metadata struct{ Name string }
			}
		}
		if err := json.Unmarshal([]byte(info["info"]), &got); err != nil {
			t.Fatalf("%s info %q: %v", call, info["info"], err)
		}
		if got.Record.ID != wantIDs[call] || got.Config.Metadata.Name != wantNames[call] {
			t.Errorf("%s info = %s; want record %s and config name %s", call, info["info"], wantIDs[call], wantNames[call])
		}
	}
}

// A restarted daemon finds its pods and containers again from the records:
// names reserved, a container whose monitor ended while it was down exited,
// a sandbox whose namespaces are no longer pinned not ready, and what no
// record names removed.
func TestRecoverAfterRestart(t *testing.T) {
	ts := newTestServer(t)
	podID, ctrID := ts.runningCtr(t, "web")
	orphanBundle := filepath.Join(ts.cfg.RunDir, "containers", strings.Repeat("c", 64))
	if err := os.MkdirAll(orphanBundle, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := ts.images.PrepareRootfs(strings.Repeat("d", 64), ts.busybox.ID); err != nil {
		t.Fatal(err)
	}
	// The test's fake monitors' pids are not alive: to the new daemon,
	// every monitor ended while it was down.
	s2 := ts.restarted(t)
	s2.recover(bg)
	st, err := s2.ContainerStatus(bg, &runtime.ContainerStatusRequest{ContainerId: ctrID})
	if err != nil || st.GetStatus().GetState() != runtime.ContainerState_CONTAINER_EXITED {
		t.Errorf("recovered container = %v, %v; want exited", st.GetStatus(), err)
	}
	ps, err := s2.PodSandboxStatus(bg, &runtime.PodSandboxStatusRequest{PodSandboxId: podID})
	if err != nil || ps.GetStatus().GetState() != runtime.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("recovered pod = %v, %v; want not ready (its namespace files are not pinned)", ps.GetStatus().GetState(), err)
	}
	if _, err := s2.RunPodSandbox(bg, &runtime.RunPodSandboxRequest{Config: podConfig("web")}); err == nil {
		t.Error("the recovered pod's name is not reserved")
	}
	if _, err := os.Stat(orphanBundle); !os.IsNotExist(err) {
		t.Errorf("orphan bundle not swept: %v", err)
	}
	if r := ts.images.Rootfses(); len(r) != 1 || r[0] != ctrID {
		t.Errorf("root filesystems after recovery = %v, want only the container's", r)
	}
}

// A prefix that names two objects is refused, by every call that looks one
// up, idempotent ones too: stopping "one of them" is not what was asked.
func TestAnAmbiguousPrefixIsInvalidArgument(t *testing.T) {
	ts := newTestServer(t)
	for _, id := range []string{"abc1" + strings.Repeat("0", 60), "abc2" + strings.Repeat("0", 60)} {
		if err := ts.sandboxes.Put(id, lifecycle.SandboxRecord{ID: id, State: lifecycle.StateReady}); err != nil {
			t.Fatal(err)
		}
		if err := ts.containers.Put(id, lifecycle.ContainerRecord{ID: id, SandboxID: id, State: lifecycle.StateRunning}); err != nil {
			t.Fatal(err)
		}
	}
	for name, call := range map[string]func() error{
		"StopPodSandbox": func() error {
			_, err := ts.StopPodSandbox(bg, &runtime.StopPodSandboxRequest{PodSandboxId: "abc"})
			return err
		},
		"RemovePodSandbox": func() error {
			_, err := ts.RemovePodSandbox(bg, &runtime.RemovePodSandboxRequest{PodSandboxId: "abc"})
			return err
		},
		"PodSandboxStatus": func() error {
			_, err := ts.PodSandboxStatus(bg, &runtime.PodSandboxStatusRequest{PodSandboxId: "abc"})
			return err
		},
		"StopContainer": func() error {
			_, err := ts.StopContainer(bg, &runtime.StopContainerRequest{ContainerId: "abc"})
			return err
		},
		"RemoveContainer": func() error {
			_, err := ts.RemoveContainer(bg, &runtime.RemoveContainerRequest{ContainerId: "abc"})
			return err
		},
		"ContainerStatus": func() error {
			_, err := ts.ContainerStatus(bg, &runtime.ContainerStatusRequest{ContainerId: "abc"})
			return err
		},
		"ExecSync": func() error {
			_, err := ts.ExecSync(bg, &runtime.ExecSyncRequest{ContainerId: "abc", Cmd: []string{"true"}})
			return err
		},
	} {
		wantCode(t, name, call(), codes.InvalidArgument)
	}
	if n := len(ts.runc.Kills()) + len(ts.runc.Execs()); n != 0 {
		t.Errorf("%d runtime calls for an ambiguous ID, want none", n)
	}
}

// nsPull is a pull for a pod of namespace ns.
func nsPull(ns string) *runtime.PullImageRequest {
	return &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: "nginx:1"},
		SandboxConfig: &runtime.PodSandboxConfig{Metadata: &runtime.PodSandboxMetadata{Name: "p", Uid: "u", Namespace: ns}}}
}
