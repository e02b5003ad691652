package server

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// refusingPlugin refuses the first pod, the first create and the first
// start of a container named "refused", and adds an env var to every container it takes.
type refusingPlugin struct {
	mu      sync.Mutex
	refused map[string]bool
	synced  chan struct{}
	// updated are the annotations of each container UpdateContainer saw.
	updated []map[string]string
}

func (p *refusingPlugin) UpdateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container, _ *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.updated = append(p.updated, c.GetAnnotations())
	return nil, nil
}

func (p *refusingPlugin) refuseOnce(kind, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if name != "refused" || p.refused[kind] {
		return nil
	}
	p.refused[kind] = true
	return errors.New("refused by the test plugin")
}

func (p *refusingPlugin) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	close(p.synced)
	return nil, nil
}

func (p *refusingPlugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.refuseOnce("pod", pod.GetName())
}

func (p *refusingPlugin) StartContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	return p.refuseOnce("start", c.GetName())
}

func (p *refusingPlugin) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if err := p.refuseOnce("container", c.GetName()); err != nil {
		return nil, nil, err
	}
	a := &api.ContainerAdjustment{}
	a.AddEnv("FROM_PLUGIN", "1")
	return a, nil, nil
}

// withNRIPlugin starts NRI on the test server and connects an in-process
// plugin to it, returning once the plugin takes events.
func (ts *testServer) withNRIPlugin(t *testing.T, p *refusingPlugin) {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "nri.sock")
	ts.cfg.NRI.SocketPath = socket
	ts.cfg.NRI.PluginPath = filepath.Join(t.TempDir(), "none")
	if err := ts.newNRI(); err != nil {
		t.Fatal(err)
	}
	if err := ts.startNRI(); err != nil {
		t.Fatal(err)
	}
	s, err := stub.New(p, stub.WithPluginName("test"), stub.WithPluginIdx("10"), stub.WithSocketPath(socket))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	select {
	case <-p.synced:
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin was never synchronized")
	}
	// The plugin joins the event list right after its synchronization:
	// BlockSync waits for that to end.
	ts.nri.BlockSync()()
}

// A plugin's refusal of a pod or a container fails the call and leaves
// nothing behind; the retry works, and the container's written spec carries
// the plugin's adjustment. A refused start leaves the container created,
// and its retry starts it.
func TestNRIRefusalLeavesNothing(t *testing.T) {
	ts := newTestServer(t)
	ts.withNRIPlugin(t, &refusingPlugin{refused: map[string]bool{}, synced: make(chan struct{})})
	podCfg := podConfig("refused")
	_, err := ts.RunPodSandbox(bg, &runtime.RunPodSandboxRequest{Config: podCfg})
	if err == nil {
		t.Fatal("RunPodSandbox refused by a plugin succeeded")
	}
	ts.wantNothingLeft(t, "a refused pod")
	podID := ts.runPod(t, podCfg)

	cfg := ctrConfig("refused")
	if _, err := ts.CreateContainer(bg, &runtime.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg}); err == nil {
		t.Fatal("CreateContainer refused by a plugin succeeded")
	}
	if n := len(ts.containers.List()); n != 0 {
		t.Errorf("a refused create left %d container records", n)
	}
	if r := ts.images.Rootfses(); len(r) != 0 {
		t.Errorf("a refused create left root filesystems: %v", r)
	}
	if ids := idDirs(filepath.Join(ts.cfg.RunDir, "containers")); len(ids) != 0 {
		t.Errorf("a refused create left bundles: %v", ids)
	}
	id := ts.createCtr(t, podID, podCfg, cfg)
	rec, err := ts.containers.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := oci.ReadSpec(rec.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(spec.Process.Env, "FROM_PLUGIN=1") {
		t.Errorf("written env %v lacks the plugin's FROM_PLUGIN=1", spec.Process.Env)
	}
	if _, err := ts.StartContainer(bg, &runtime.StartContainerRequest{ContainerId: id}); err == nil {
		t.Fatal("StartContainer refused by a plugin succeeded")
	}
	if st := ts.ctrState(t, id); st != runtime.ContainerState_CONTAINER_CREATED {
		t.Errorf("a refused start left the container %v, want created", st)
	}
	if _, err := ts.StartContainer(bg, &runtime.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("StartContainer after a refused one: %v", err)
	}
	if st := ts.ctrState(t, id); st != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the retried start left the container %v, want running", st)
	}
}

// UpdateContainerResources hands plugins its request's annotations over the
// container's own; the record keeps the create's.
func TestNRIUpdateContainerSeesTheRequestsAnnotations(t *testing.T) {
	ts := newTestServer(t)
	p := &refusingPlugin{refused: map[string]bool{}, synced: make(chan struct{})}
	ts.withNRIPlugin(t, p)
	podCfg := podConfig("pod")
	podID := ts.runPod(t, podCfg)
	cfg := ctrConfig("app")
	cfg.Annotations = map[string]string{"from-create": "1", "both": "create"}
	id := ts.createCtr(t, podID, podCfg, cfg)
	_, err := ts.UpdateContainerResources(bg, &runtime.UpdateContainerResourcesRequest{
		ContainerId: id,
		Linux:       &runtime.LinuxContainerResources{CpuShares: 512},
		Annotations: map[string]string{"from-update": "2", "both": "update"},
	})
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	updated := p.updated
	p.mu.Unlock()
	want := map[string]string{"from-create": "1", "from-update": "2", "both": "update"}
	if len(updated) != 1 || !maps.Equal(updated[0], want) {
		t.Errorf("the plugin's UpdateContainer saw annotations %v, want %v", updated, want)
	}
	rec, err := ts.containers.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(rec.Annotations, cfg.Annotations) {
		t.Errorf("the record's annotations became %v, want the create's %v", rec.Annotations, cfg.Annotations)
	}
}

// UpdatePodSandboxResources keeps the pod's new overhead and resources with
// its record, where a restarted daemon finds them; a nil one keeps the old.
func TestUpdatePodSandboxResourcesIsRecorded(t *testing.T) {
	ts := newTestServer(t, func(c *config.Config) { c.NRI.Enabled = false })
	podCfg := podConfig("resized")
	podCfg.Linux.Overhead = &runtime.LinuxContainerResources{MemoryLimitInBytes: 1 << 20}
	id := ts.runPod(t, podCfg)
	resources := &runtime.LinuxContainerResources{CpuShares: 512, MemoryLimitInBytes: 128 << 20}
	if _, err := ts.UpdatePodSandboxResources(bg, &runtime.UpdatePodSandboxResourcesRequest{PodSandboxId: id, Resources: resources}); err != nil {
		t.Fatalf("UpdatePodSandboxResources: %v", err)
	}
	reopened, err := openTable[lifecycle.SandboxRecord](ts.Server, sandboxesDir, newSandbox)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := reopened.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rec.DecodeConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(cfg.GetLinux().GetResources(), resources) {
		t.Errorf("recorded resources %v, want %v", cfg.GetLinux().GetResources(), resources)
	}
	if cfg.GetLinux().GetOverhead().GetMemoryLimitInBytes() != 1<<20 {
		t.Errorf("recorded overhead %v, want the pod's own kept", cfg.GetLinux().GetOverhead())
	}
	_, err = ts.UpdatePodSandboxResources(bg, &runtime.UpdatePodSandboxResourcesRequest{PodSandboxId: "nosuchpod", Resources: resources})
	wantCode(t, "an unknown pod", err, codes.NotFound)
}

// What UpdateContainerResources asks comes back unchanged through NRI's
// form when no plugin changes it; NRI's values win over the base's.
func TestNRIResourcesRoundTrip(t *testing.T) {
	r := &runtime.LinuxContainerResources{
		CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 64 << 20,
		MemorySwapLimitInBytes: 128 << 20, CpusetCpus: "0-1", CpusetMems: "0",
		HugepageLimits: []*runtime.HugepageLimit{{PageSize: "2MB", Limit: 4 << 20}},
		Unified:        map[string]string{"memory.high": "1000000"},
	}
	if got := criResources(nil, nriResources(r)); !proto.Equal(got, r) {
		t.Errorf("round trip = %v, want %v", got, r)
	}
	n := nriResources(r)
	n.Memory.Limit = api.Int64(32 << 20)
	if got := criResources(r, n); got.GetMemoryLimitInBytes() != 32<<20 || got.GetCpuShares() != 512 {
		t.Errorf("adjusted = %v, want memory 32 MiB and the rest kept", got)
	}
}

// slowSyncPlugin joins late; its Synchronize records the containers it is
// given, then blocks until release is closed (or its context ends); it
// records every container it is told of by CreateContainer.
type slowSyncPlugin struct {
	reached chan struct{}
	release chan struct{}

	mu      sync.Mutex
	synced  []string
	created []string
}

func (p *slowSyncPlugin) Synchronize(ctx context.Context, _ []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	p.mu.Lock()
	for _, c := range ctrs {
		p.synced = append(p.synced, c.GetId())
	}
	p.mu.Unlock()
	close(p.reached)
	select {
	case <-p.release:
	case <-ctx.Done():
	}
	return nil, nil
}

func (p *slowSyncPlugin) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.created = append(p.created, c.GetId())
	return nil, nil, nil
}

func (p *slowSyncPlugin) knows(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.synced, id) || slices.Contains(p.created, id)
}

// A container made while a late-joining plugin's Synchronize is in
// progress reaches the plugin, in the Synchronize set or as a
// CreateContainer event, never neither (the NRI spec; cri-tools' "NRI
// plugin synchronization" specs), also when the plugin takes longer over
// its Synchronize than the peers' 2s request timeout, as cri-tools' does.
func TestNRIContainerMadeDuringLateSyncReachesThePlugin(t *testing.T) {
	ts := newTestServer(t)
	ts.withNRIPlugin(t, &refusingPlugin{refused: map[string]bool{}, synced: make(chan struct{})})
	podCfg := podConfig("late")
	podID := ts.runPod(t, podCfg)
	before := ts.createCtr(t, podID, podCfg, ctrConfig("before"))

	late := &slowSyncPlugin{reached: make(chan struct{}), release: make(chan struct{})}
	st, err := stub.New(late, stub.WithPluginName("late"), stub.WithPluginIdx("20"), stub.WithSocketPath(ts.cfg.NRI.SocketPath))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	select {
	case <-late.reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the late plugin was never synchronized")
	}
	created := make(chan string, 1)
	go func() {
		id, err := ts.CreateContainer(bg, &runtime.CreateContainerRequest{PodSandboxId: podID, Config: ctrConfig("during"), SandboxConfig: podCfg})
		if err != nil {
			t.Errorf("CreateContainer during the late plugin's Synchronize: %v", err)
		}
		created <- id.GetContainerId()
	}()
	// Held open a while, with the create waiting, as cri-tools holds it
	// (2s: the peers' request timeout, which dropped the plugin here).
	time.Sleep(2500 * time.Millisecond)
	close(late.release)
	during := <-created
	after := ts.createCtr(t, podID, podCfg, ctrConfig("after"))
	for _, id := range []string{before, during, after} {
		if id == "" {
			continue
		}
		deadline := time.Now().Add(10 * time.Second)
		for !late.knows(id) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if !late.knows(id) {
			late.mu.Lock()
			t.Errorf("container %s never reached the late plugin: synchronized with %v, told of %v", id, late.synced, late.created)
			late.mu.Unlock()
		}
	}
}
