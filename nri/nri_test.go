package nri

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
)

// fakeRuntime is the runtime's side: a fixed state, and the updates asked.
type fakeRuntime struct {
	pods []*api.PodSandbox
	ctrs []*api.Container

	mu      sync.Mutex
	updates []string
	states  int // how often State was asked
}

func (f *fakeRuntime) State(context.Context) ([]*api.PodSandbox, []*api.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states++
	return f.pods, f.ctrs, nil
}

func (f *fakeRuntime) stateCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.states
}

func (f *fakeRuntime) UpdateContainers(_ context.Context, u []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range u {
		f.updates = append(f.updates, c.GetContainerId())
	}
	return nil, nil
}

func (f *fakeRuntime) updated() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.updates)
}

// testPlugin is an in-process plugin: it records what it was synchronized
// with, adds an env var to each container and refuses pods named "refused".
type testPlugin struct {
	synced chan []string
}

func (p *testPlugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	var names []string
	for _, pod := range pods {
		names = append(names, pod.GetName())
	}
	for _, c := range ctrs {
		names = append(names, c.GetName())
	}
	p.synced <- names
	return nil, nil
}

func (p *testPlugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	if pod.GetName() == "refused" {
		return errors.New("no such pods here")
	}
	return nil
}

func (p *testPlugin) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	a := &api.ContainerAdjustment{}
	a.AddEnv("FROM_PLUGIN", "1")
	return a, nil, nil
}

func startNRI(t *testing.T, rt Runtime) (_ *NRI, socket string) {
	t.Helper()
	return startNRIIn(t, t.TempDir(), rt)
}

// startNRIIn starts NRI with its socket and plugin dir in dir.
func startNRIIn(t *testing.T, dir string, rt Runtime) (_ *NRI, socket string) {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	socket = filepath.Join(dir, "nri.sock")
	n, err := New(Config{
		SocketPath:          socket,
		PluginPath:          filepath.Join(dir, "plugins"),
		PluginConfigPath:    filepath.Join(dir, "conf.d"),
		RegistrationTimeout: 5 * time.Second,
		RequestTimeout:      5 * time.Second,
	}, "test", "0", rt, logrus.NewEntry(log))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n, socket
}

func connect(t *testing.T, socket string, p *testPlugin) stub.Stub {
	t.Helper()
	s, err := stub.New(p, stub.WithPluginName("test"), stub.WithPluginIdx("10"), stub.WithSocketPath(socket))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// A plugin that connects late is synchronized with the runtime's state, its
// verdicts and adjustments come back from the events, and its unsolicited
// updates reach the runtime.
func TestPluginSynchronizedAdjustsAndUpdates(t *testing.T) {
	rt := &fakeRuntime{
		pods: []*api.PodSandbox{{Id: "p1", Name: "web"}, {Id: "p2", Name: "db"}},
		ctrs: []*api.Container{{Id: "c1", PodSandboxId: "p1", Name: "nginx", State: api.ContainerState_CONTAINER_RUNNING}},
	}
	n, socket := startNRI(t, rt)
	if n.Active() {
		t.Error("Active with no plugin")
	}
	if got := rt.stateCalls(); got != 0 {
		t.Errorf("State asked %d times at a start with no plugin to launch, want 0", got)
	}
	p := &testPlugin{synced: make(chan []string, 1)}
	s := connect(t, socket, p)
	select {
	case got := <-p.synced:
		if want := []string{"web", "db", "nginx"}; !slices.Equal(got, want) {
			t.Errorf("plugin synchronized with %v, want %v", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin was never synchronized")
	}
	// Registration ends after the synchronization: wait for the plugin to
	// be among those the events go to.
	ctx := context.Background()
	pod, ctr := &api.PodSandbox{Id: "p3", Name: "new"}, &api.Container{Id: "c2", PodSandboxId: "p3", Name: "app"}
	var adj *api.ContainerAdjustment
	deadline := time.Now().Add(10 * time.Second)
	for adj == nil && time.Now().Before(deadline) {
		var err error
		if adj, _, err = n.CreateContainer(ctx, pod, ctr); err != nil {
			t.Fatalf("CreateContainer: %v", err)
		}
		if len(adj.GetEnv()) == 0 {
			adj = nil
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !n.Active() {
		t.Error("not Active with a plugin taking events")
	}
	spec := &specs.Spec{Process: &specs.Process{Env: []string{"PATH=/bin"}}}
	if err := AdjustSpec(spec, adj, nil); err != nil {
		t.Fatal(err)
	}
	if want := []string{"PATH=/bin", "FROM_PLUGIN=1"}; !slices.Equal(spec.Process.Env, want) {
		t.Errorf("adjusted env %v, want %v", spec.Process.Env, want)
	}
	if err := n.RunPodSandbox(ctx, &api.PodSandbox{Id: "p4", Name: "refused"}); !errors.Is(err, ErrPlugin) {
		t.Errorf("a pod the plugin refuses: %v, want ErrPlugin", err)
	}
	if err := n.RunPodSandbox(ctx, pod); err != nil {
		t.Errorf("a pod the plugin takes: %v", err)
	}
	if _, err := s.UpdateContainers([]*api.ContainerUpdate{{ContainerId: "c1"}}); err != nil {
		t.Fatal(err)
	}
	if got := rt.updated(); !slices.Equal(got, []string{"c1"}) {
		t.Errorf("runtime asked to update %v, want [c1]", got)
	}
}

// The start asks for the state only when the plugin dir may hold a plugin
// to launch: the state of a restart at 100 pods costs ~15 ms.
func TestStartAsksStateOnlyForPluginsToLaunch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]os.FileMode // in the plugin dir; a 0 mode is a dir
		want  int
	}{
		{"no plugin dir", nil, 0},
		{"only subdirectories", map[string]os.FileMode{"sub": 0}, 0},
		{"a file", map[string]os.FileMode{"10-plugin": 0o644}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, mode := range tc.files {
				path := filepath.Join(dir, "plugins", name)
				if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
					t.Fatal(err)
				}
				var err error
				if mode == 0 {
					err = os.Mkdir(path, 0o700)
				} else {
					err = os.WriteFile(path, nil, mode)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			rt := &fakeRuntime{}
			startNRIIn(t, dir, rt)
			if got := rt.stateCalls(); got != tc.want {
				t.Errorf("State asked %d times at start, want %d", got, tc.want)
			}
		})
	}
}

// A nil NRI is off: every event passes, nothing is adjusted.
func TestNilIsOff(t *testing.T) {
	var n *NRI
	ctx := context.Background()
	if err := n.RunPodSandbox(ctx, nil); err != nil {
		t.Error(err)
	}
	adj, upd, err := n.CreateContainer(ctx, nil, nil)
	if adj != nil || upd != nil || err != nil {
		t.Errorf("CreateContainer of a nil NRI = %v, %v, %v", adj, upd, err)
	}
	res := &api.LinuxResources{}
	if got, _, err := n.UpdateContainer(ctx, nil, nil, res); got != res || err != nil {
		t.Errorf("UpdateContainer of a nil NRI changed the resources: %v, %v", got, err)
	}
	n.BlockSync()()
	n.Stop()
	if n.Active() {
		t.Error("a nil NRI is Active")
	}
}
