package server

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/fake"
	"github.com/minicri/minicri/store"
)

// testServer is a Server on the fakes of server/internal/fake and real
// record tables in a temp dir: every handler runs without root, runc or CNI.
type testServer struct {
	*Server
	images  *fake.Images
	network *fake.Network
	pins    *fake.Pins
	monitor *fake.Monitor
	runc    *fake.Runtime // the default handler's runtime, "runc"
	busybox image.Image   // present from the start
}

// fakeRuntimes gives fake.Runtimes the method set of runtimeSet.
type fakeRuntimes struct{ *fake.Runtimes }

func (h fakeRuntimes) Get(handler string) (ociRuntime, error) {
	rt, err := h.Runtimes.Get(handler)
	if err != nil {
		return nil, err
	}
	return rt, nil
}

// fakeMonitor gives fake.Monitor the method set of containerMonitor.
type fakeMonitor struct{ *fake.Monitor }

func (m fakeMonitor) BeginJoin(ctx context.Context, joinDir string, o conmon.Options) (pendingJoin, error) {
	p, err := m.Monitor.BeginJoin(ctx, joinDir, o)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// newTestServer builds a testServer; edit, when given, changes the config
// before the server is made.
func newTestServer(t testing.TB, edit ...func(*config.Config)) *testServer {
	t.Helper()
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Root = filepath.Join(dir, "root")
	cfg.RunDir = filepath.Join(dir, "run")
	cfg.CNI.ConfDir = filepath.Join(dir, "cni")
	cfg.CDI.SpecDirs = []string{filepath.Join(dir, "cdi")}
	cfg.Runtime.MonitorShare = 1
	cfg.Runtime.Handlers = map[string]config.RuntimeHandler{"runc": {Path: "runc"}} // the fake runtime runs nothing
	// What New would choose (chooseDefaultHandler): the only handler.
	cfg.Runtime.DefaultHandler = "runc"
	for _, e := range edit {
		e(&cfg)
	}
	// As New decides it; the fakes stand for a node with systemd when a
	// test asks for that driver.
	driver, err := config.ResolveCgroupDriver(cfg.CgroupDriver, config.Node{SystemdBooted: cfg.CgroupDriver == config.SystemdDriver})
	if err != nil {
		t.Fatal(err)
	}
	cfg.CgroupDriver = driver.Driver
	log := logrus.New()
	log.SetOutput(io.Discard)
	ts := &testServer{
		images:  fake.NewImages(filepath.Join(dir, "rootfs")),
		network: fake.NewNetwork(),
		pins:    fake.NewPins(),
		monitor: fake.NewMonitor(),
		runc:    fake.NewRuntime(),
	}
	ts.busybox = ts.images.Add("docker.io/library/busybox:latest", image.Config{Cmd: []string{"sh"}, Env: []string{"PATH=/bin"}})
	// A kill ends the container as runc's does: its monitor sees it exit.
	ts.runc.OnKill = func(id string, sig syscall.Signal) { _ = ts.monitor.Exit(id, 128+int(sig)) }
	ts.Server = &Server{
		cfg:            cfg,
		cgroupDriver:   driver,
		version:        "test",
		log:            logrus.NewEntry(log),
		sandboxNames:   store.NewNames(),
		containerNames: store.NewNames(),
		monitors:       newMonitorPlacement(cfg.Runtime.MonitorShare),
		monitorPath:    self,
		cdi:            oci.NewCDI(cfg.CDI.SpecDirs),
		pins:           ts.pins,
		criu:           workingCRIU(),
		runtimes:       fakeRuntimes{&fake.Runtimes{Default: "runc", Runtimes: map[string]*fake.Runtime{"runc": ts.runc}}},
	}
	ts.useCNI(ts.network)
	ts.useImages(ts.images)
	ts.useMonitor(fakeMonitor{ts.monitor})
	if err = ts.openTables(); err != nil {
		t.Fatal(err)
	}
	ts.usePods()
	if err := ts.restoreRuntimeConfig(); err != nil {
		t.Fatal(err)
	}
	if err := ts.startStreaming(ts.log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.Close() })
	return ts
}

// restarted is a new daemon on ts's state, its records read and nothing
// recovered yet: what a restart's recovery starts from. It shares ts's
// fakes (the monitors, the network, the images) as a node's daemons share
// the node.
func (ts *testServer) restarted(t *testing.T) *Server {
	t.Helper()
	s := &Server{
		cfg: ts.cfg, version: ts.version, log: ts.log,
		sandboxNames: store.NewNames(), containerNames: store.NewNames(),
		monitors: newMonitorPlacement(ts.cfg.Runtime.MonitorShare), monitorPath: ts.monitorPath,
		cdi: ts.cdi, pins: ts.pins, runtimes: ts.runtimes, cgroupDriver: ts.cgroupDriver,
	}
	s.useCNI(ts.network)
	s.useImages(ts.images)
	s.useMonitor(fakeMonitor{ts.monitor})
	if err := s.openTables(); err != nil {
		t.Fatal(err)
	}
	s.usePods()
	return s
}

var bg = context.Background()

// podConfig is a pod as the kubelet sends it, with its own network.
func podConfig(name string) *runtime.PodSandboxConfig {
	return &runtime.PodSandboxConfig{
		Metadata:     &runtime.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name + "-uid"},
		Hostname:     name,
		LogDirectory: "",
		Linux: &runtime.LinuxPodSandboxConfig{SecurityContext: &runtime.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_CONTAINER},
		}},
	}
}

func ctrConfig(name string) *runtime.ContainerConfig {
	return &runtime.ContainerConfig{
		Metadata: &runtime.ContainerMetadata{Name: name},
		Image:    &runtime.ImageSpec{Image: "docker.io/library/busybox:latest"},
		Command:  []string{"sleep", "1000"},
	}
}

// runPod runs a pod and fails the test if it does not start.
func (ts *testServer) runPod(t testing.TB, cfg *runtime.PodSandboxConfig) string {
	t.Helper()
	resp, err := ts.RunPodSandbox(bg, &runtime.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	return resp.GetPodSandboxId()
}

// createCtr creates a container in a pod and fails the test if it cannot.
func (ts *testServer) createCtr(t testing.TB, podID string, podCfg *runtime.PodSandboxConfig, cfg *runtime.ContainerConfig) string {
	t.Helper()
	resp, err := ts.CreateContainer(bg, &runtime.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	return resp.GetContainerId()
}

// runningCtr makes a pod with one started container.
func (ts *testServer) runningCtr(t *testing.T, name string) (podID, ctrID string) {
	t.Helper()
	pod := podConfig(name)
	podID = ts.runPod(t, pod)
	ctrID = ts.createCtr(t, podID, pod, ctrConfig("app"))
	if _, err := ts.StartContainer(bg, &runtime.StartContainerRequest{ContainerId: ctrID}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	return podID, ctrID
}

// ctrState is the container's state as ContainerStatus reports it.
func (ts *testServer) ctrState(t *testing.T, id string) runtime.ContainerState {
	t.Helper()
	resp, err := ts.ContainerStatus(bg, &runtime.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatalf("ContainerStatus(%s): %v", id, err)
	}
	return resp.GetStatus().GetState()
}

// waitExited waits until the container's exit is recorded.
func (ts *testServer) waitExited(t *testing.T, id string) {
	t.Helper()
	select {
	case <-ts.ctr(id).exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("container %s: exit not recorded after 10s", id)
	}
}

// wantCode fails the test unless err has the gRPC code want and its message
// names every one of names (a field, an ID).
func wantCode(t *testing.T, what string, err error, want codes.Code, names ...string) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: code %s (%v), want %s", what, got, err, want)
	}
	for _, n := range names {
		if !strings.Contains(strings.ToLower(status.Convert(err).Message()), strings.ToLower(n)) {
			t.Errorf("%s: message %q does not name %q", what, status.Convert(err).Message(), n)
		}
	}
}

// wantNothingLeft fails the test when anything is held: namespace pins,
// shm mounts, network attachments, infra processes, root filesystems,
// records, in-memory objects, pod dirs and bundles.
func (ts *testServer) wantNothingLeft(t *testing.T, what string) {
	t.Helper()
	if n := ts.pins.Held(); n != 0 {
		t.Errorf("%s: %d namespace pins or shm mounts left", what, n)
	}
	if n := ts.network.Attached(); n != 0 {
		t.Errorf("%s: %d pods left attached to the network", what, n)
	}
	if n := ts.monitor.Infras(); n != 0 {
		t.Errorf("%s: %d infra processes left", what, n)
	}
	if r := ts.images.Rootfses(); len(r) != 0 {
		t.Errorf("%s: root filesystems left: %v", what, r)
	}
	if n := len(ts.sandboxes.List()); n != 0 {
		t.Errorf("%s: %d sandbox records left", what, n)
	}
	if n := len(ts.containers.List()); n != 0 {
		t.Errorf("%s: %d container records left", what, n)
	}
	if containers, sandboxes := ts.objectCount(); containers+sandboxes != 0 {
		t.Errorf("%s: %d container and %d sandbox objects left", what, containers, sandboxes)
	}
	for _, d := range []string{"pods", "containers"} {
		if ids := idDirs(filepath.Join(ts.cfg.RunDir, d)); len(ids) != 0 {
			t.Errorf("%s: %s dirs left: %v", what, d, ids)
		}
	}
}
