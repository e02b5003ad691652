package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/server/internal/fake"
)

func TestRunPodSandboxValidatesAndReserves(t *testing.T) {
	ts := newTestServer(t)
	noMeta := podConfig("web")
	noMeta.Metadata = nil
	cases := []struct {
		name    string
		req     *runtime.RunPodSandboxRequest
		want    codes.Code
		inError string
	}{
		{"no config", &runtime.RunPodSandboxRequest{}, codes.InvalidArgument, "config"},
		{"no metadata", &runtime.RunPodSandboxRequest{Config: noMeta}, codes.InvalidArgument, "metadata"},
		{"unknown handler", &runtime.RunPodSandboxRequest{Config: podConfig("web"), RuntimeHandler: "kata"}, codes.InvalidArgument, "runtime_handler"},
	}
	for _, c := range cases {
		_, err := ts.RunPodSandbox(bg, c.req)
		wantCode(t, c.name, err, c.want, c.inError)
	}
	ts.wantNothingLeft(t, "refused pods")

	id := ts.runPod(t, podConfig("web"))
	_, err := ts.RunPodSandbox(bg, &runtime.RunPodSandboxRequest{Config: podConfig("web")})
	wantCode(t, "the same pod again", err, codes.AlreadyExists, id)
	st, err := ts.PodSandboxStatus(bg, &runtime.PodSandboxStatusRequest{PodSandboxId: id[:12]})
	if err != nil {
		t.Fatalf("PodSandboxStatus by prefix: %v", err)
	}
	if st.GetStatus().GetState() != runtime.PodSandboxState_SANDBOX_READY || st.GetStatus().GetNetwork().GetIp() == "" {
		t.Errorf("status = %v, want ready with an IP", st.GetStatus())
	}
	if ts.pins.Held() == 0 || ts.network.Attached() != 1 {
		t.Errorf("a running pod holds %d pins and %d attachments; want some and 1", ts.pins.Held(), ts.network.Attached())
	}
}

// A failure at any step of RunPodSandbox undoes the steps before it and
// frees the name, so that the kubelet's retry succeeds.
func TestRunPodSandboxUndoesWhatItMadeOnFailure(t *testing.T) {
	for _, c := range []struct {
		step string
		fail func(ts *testServer)
		pid  bool // the pod shares its PID namespace: an infra process
	}{
		{"pin namespaces", func(ts *testServer) { ts.pins.Fail("Pin", fake.ErrInjected) }, false},
		{"mount shm", func(ts *testServer) { ts.pins.Fail("MountShm", fake.ErrInjected) }, false},
		{"start infra", func(ts *testServer) { ts.monitor.Fail("StartPause", fake.ErrInjected) }, true},
		{"CNI ADD", func(ts *testServer) { ts.network.Fail("Setup", fake.ErrInjected) }, true},
		// A plugin that refuses the config refuses its DEL too: the rest is
		// undone all the same (before, the failed DEL kept the pins, the shm
		// mount, the infra process and its scope, and the pod dir).
		{"CNI ADD and DEL", func(ts *testServer) {
			ts.network.Fail("Setup", fake.ErrInjected)
			ts.network.Fail("Teardown", fake.ErrInjected)
		}, true},
	} {
		t.Run(c.step, func(t *testing.T) {
			ts := newTestServer(t)
			cfg := podConfig("web")
			if c.pid {
				cfg.Linux.SecurityContext.NamespaceOptions.Pid = runtime.NamespaceMode_POD
			}
			c.fail(ts)
			_, err := ts.RunPodSandbox(bg, &runtime.RunPodSandboxRequest{Config: cfg})
			wantCode(t, "RunPodSandbox", err, codes.Internal, fake.ErrInjected.Error())
			ts.wantNothingLeft(t, "after the failure")
			ts.pins.Fail("Pin", nil)
			ts.pins.Fail("MountShm", nil)
			ts.monitor.Fail("StartPause", nil)
			ts.network.Fail("Setup", nil)
			ts.network.Fail("Teardown", nil)
			ts.runPod(t, cfg) // the name is free again
		})
	}
}

// The files every container of a pod mounts are there when the sandbox is
// ready: on the pod's own network /etc/hosts names its IP, which CNI gave.
func TestRunPodSandboxWritesPodFiles(t *testing.T) {
	hostNet := podConfig("host")
	hostNet.Linux.SecurityContext.NamespaceOptions.Network = runtime.NamespaceMode_NODE
	for _, cfg := range []*runtime.PodSandboxConfig{podConfig("web"), hostNet} {
		t.Run(cfg.GetMetadata().GetName(), func(t *testing.T) {
			ts := newTestServer(t)
			cfg.DnsConfig = &runtime.DNSConfig{Servers: []string{"10.96.0.10"}}
			id := ts.runPod(t, cfg)
			st, err := ts.PodSandboxStatus(bg, &runtime.PodSandboxStatusRequest{PodSandboxId: id})
			if err != nil {
				t.Fatal(err)
			}
			ip := st.GetStatus().GetNetwork().GetIp()
			if (ip == "") != (cfg == hostNet) {
				t.Fatalf("pod IP %q", ip)
			}
			want := map[string]string{"hostname": cfg.GetHostname(), "hosts": cfg.GetHostname(), "resolv.conf": "nameserver 10.96.0.10"}
			if ip != "" {
				want["hosts"] = ip + "\t" + cfg.GetHostname()
			}
			for file, line := range want {
				data, err := os.ReadFile(filepath.Join(ts.cfg.RunDir, "pods", id, file))
				if err != nil || !strings.Contains(string(data), line) {
					t.Errorf("%s = %q, %v; want a line with %q", file, data, err, line)
				}
			}
		})
	}
}

// CreateContainer on a sandbox whose RunPodSandbox has not answered (here
// held in its network's set-up; with NRI, in a plugin's RunPodSandbox hook,
// which knows the ID) is refused at once, sandbox not ready, and leaves
// nothing of the container; once the pod is made, the create works.
func TestCreateContainerInSandboxBeingMadeIsRefused(t *testing.T) {
	ts := newTestServer(t)
	reached, release := make(chan string, 1), make(chan struct{})
	ts.network.OnSetup = func(pn network.PodNetwork) {
		reached <- pn.ID
		<-release
	}
	podCfg := podConfig("slow")
	ran := make(chan error, 1)
	go func() {
		_, err := ts.RunPodSandbox(bg, &runtime.RunPodSandboxRequest{Config: podCfg})
		ran <- err
	}()
	var podID string
	select {
	case podID = <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("RunPodSandbox never reached the network's set-up")
	}
	created := make(chan error, 1)
	go func() {
		_, err := ts.CreateContainer(bg, &runtime.CreateContainerRequest{PodSandboxId: podID, Config: ctrConfig("early"), SandboxConfig: podCfg})
		created <- err
	}()
	select {
	case err := <-created:
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "not ready") {
			t.Errorf("CreateContainer in a sandbox being made: %v, want FailedPrecondition, not ready", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("CreateContainer in a sandbox being made waited for its RunPodSandbox instead of failing")
	}
	close(release)
	if err := <-ran; err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	if n := len(ts.containers.List()); n != 0 {
		t.Errorf("the refused create left %d container records", n)
	}
	if ids := idDirs(filepath.Join(ts.cfg.RunDir, "containers")); len(ids) != 0 {
		t.Errorf("the refused create left bundles: %v", ids)
	}
	ts.network.OnSetup = nil
	ts.createCtr(t, podID, podCfg, ctrConfig("early"))
}
