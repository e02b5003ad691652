//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/internal/procstat"
)

// nriPlugin is testdata/nriplugin running as an external NRI plugin of a
// daemon: its events are the lines of a file.
type nriPlugin struct {
	events string
	cmd    *exec.Cmd
	exited chan struct{}
}

// buildNRIPlugin builds testdata/nriplugin, on the NRI library's stub, into
// a temp dir.
func buildNRIPlugin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "nriplugin")
	build := exec.Command("go", "build", "-o", bin, "./testdata/nriplugin")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the NRI plugin: %v\n%s", err, out)
	}
	return bin
}

// startNRIPlugin starts the plugin on the daemon's NRI socket and stops it
// at the end of the test.
func startNRIPlugin(t *testing.T, bin string, d *Daemon, args ...string) *nriPlugin {
	t.Helper()
	p := &nriPlugin{events: filepath.Join(t.TempDir(), "events"), exited: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"-socket", d.NRISocket, "-events", p.events}, args...)...)
	p.cmd.Stderr = os.Stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

func (p *nriPlugin) lines() []string {
	data, _ := os.ReadFile(p.events)
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

// waitEvent waits until the plugin got an event whose line is want.
func (p *nriPlugin) waitEvent(t *testing.T, want string) {
	t.Helper()
	p.waitLine(t, fmt.Sprintf("%q", want), func(l string) bool { return l == want })
}

// waitLine waits until one of the plugin's lines matches, and answers it;
// what says, in the failure, what was waited for.
func (p *nriPlugin) waitLine(t *testing.T, what string, match func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if i := slices.IndexFunc(p.lines(), match); i >= 0 {
			return p.lines()[i]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the NRI plugin never got %s; its events:\n%s", what, strings.Join(p.lines(), "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An external NRI plugin, as containerd and cri-o run them: one that
// connects after pods exist is synchronized with all of them; its
// adjustment of a container (an environment variable, a ulimit) is seen
// inside the container; its refusal of a create fails it with nothing left
// behind, and a retry then works; it sees a container that exits on its own
// stop, a container's update and a pod's resize; after a restart of the daemon it is
// synchronized with the recovered pods and containers, the resize kept, and
// a resize after the restart reaches it.
func TestNRIPluginAdjustsAndIsSynchronized(t *testing.T) {
	bin := buildNRIPlugin(t)
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfgs := map[string]*runtime.PodSandboxConfig{}
	pods := map[string]string{}
	for _, name := range []string{"nri-a", "nri-b", "nri-c"} {
		podCfgs[name] = d.hostNetworkPod(name)
		pods[name] = d.runPod(t, podCfgs[name])
	}
	early := d.startContainer(t, pods["nri-a"], podCfgs["nri-a"], runningContainer("early", ref))

	plugin := startNRIPlugin(t, bin, d, "-fail-create-once", "refused")
	plugin.waitEvent(t, "Synchronize pods=3 containers=1")
	plugin.waitEvent(t, "synced-container early CONTAINER_RUNNING pid=true")

	t.Run("adjustment", func(t *testing.T) {
		cfg := containerConfig("env", ref, "sh", "-c", `echo "env=$NRI_E2E nofile=$(ulimit -n)"`)
		st, log := d.runToExit(t, pods["nri-b"], podCfgs["nri-b"], cfg)
		if !strings.Contains(log, "env=injected nofile=1234") {
			t.Errorf("the plugin's env and RLIMIT_NOFILE are not in the container (exit %d): %q", st.GetExitCode(), log)
		}
		plugin.waitEvent(t, "StartContainer env")
		// Exited on its own: no StopContainer call made it stop.
		plugin.waitEvent(t, "StopContainer env exit=0")
	})

	t.Run("refusal", func(t *testing.T) {
		bundles := dirNames(filepath.Join(d.RunDir, "containers"))
		cfg := containerConfig("refused", ref, "true")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := d.Runtime.CreateContainer(ctx, pods["nri-c"], cfg, podCfgs["nri-c"])
		if err == nil || !strings.Contains(err.Error(), "nriplugin refuses") {
			t.Fatalf("CreateContainer refused by the plugin answered %v, want the plugin's error", err)
		}
		list, lerr := d.Runtime.ListContainers(ctx, &runtime.ContainerFilter{PodSandboxId: pods["nri-c"]})
		if lerr != nil {
			t.Fatal(lerr)
		}
		if len(list) != 0 {
			t.Errorf("a refused create left containers: %v", list)
		}
		if after := dirNames(filepath.Join(d.RunDir, "containers")); len(after) != len(bundles) {
			t.Errorf("a refused create left a bundle: %v, before %v", after, bundles)
		}
		// The name is free again, and the plugin takes the second create.
		d.createContainer(t, pods["nri-c"], podCfgs["nri-c"], cfg)
		plugin.waitEvent(t, "CreateContainer refused refused")
		plugin.waitEvent(t, "CreateContainer refused")
	})

	t.Run("container update", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Runtime.UpdateContainerResources(ctx, early, &runtime.ContainerResources{Linux: &runtime.LinuxContainerResources{MemoryLimitInBytes: 96 << 20}}); err != nil {
			t.Fatalf("UpdateContainerResources: %v", err)
		}
		plugin.waitEvent(t, fmt.Sprintf("UpdateContainer early memory=%d", 96<<20))
		plugin.waitEvent(t, "PostUpdateContainer early")
	})

	t.Run("pod resize", func(t *testing.T) {
		d.resizePod(t, pods["nri-c"], 256<<20)
		plugin.waitEvent(t, fmt.Sprintf("UpdatePodSandbox nri-c memory=%d was=0", 256<<20))
	})

	// The plugin that connects after the restart lives to the end of the
	// test: the resize after the restart is told to it.
	var again *nriPlugin
	whole := t
	t.Run("restart", func(t *testing.T) {
		d.restart(t)
		// The old daemon's end closed the plugin's connection.
		select {
		case <-plugin.exited:
		case <-time.After(30 * time.Second):
			t.Fatal("the NRI plugin still runs after its daemon was killed")
		}
		again = startNRIPlugin(whole, bin, d)
		// early (running), env (exited) and refused (created).
		again.waitEvent(t, "Synchronize pods=3 containers=3")
		again.waitEvent(t, "synced-container early CONTAINER_RUNNING pid=true")
		again.waitEvent(t, "synced-container env CONTAINER_STOPPED pid=false")
		again.waitEvent(t, "synced-container refused CONTAINER_CREATED pid=true")
		// The resize before the restart was kept with the pod.
		again.waitEvent(t, fmt.Sprintf("synced-pod nri-c memory=%d", 256<<20))
	})

	t.Run("pod resize after restart", func(t *testing.T) {
		if again == nil {
			t.Skip("no plugin: the restart failed")
		}
		d.resizePod(t, pods["nri-c"], 384<<20)
		// The new plugin is told of it, the pod still holding the
		// resources of the resize before the restart.
		again.waitEvent(t, fmt.Sprintf("UpdatePodSandbox nri-c memory=%d was=%d", 384<<20, 256<<20))
	})
}

// resizePod tells the daemon, as the kubelet's client does in an in-place
// resize, of a pod's new memory limit.
func (d *Daemon) resizePod(t *testing.T, id string, memory int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := d.Runtime.UpdatePodSandboxResources(ctx, &runtime.UpdatePodSandboxResourcesRequest{
		PodSandboxId: id,
		Resources:    &runtime.LinuxContainerResources{MemoryLimitInBytes: memory},
	})
	if err != nil {
		t.Fatalf("UpdatePodSandboxResources %s, memory %d: %v", id, memory, err)
	}
}

// pluginProcesses are the pids of processes running bin.
func pluginProcesses(bin string) []int {
	var pids []int
	procstat.EachCmdline(func(pid int, cmdline string) {
		if strings.HasPrefix(cmdline, bin) {
			pids = append(pids, pid)
		}
	})
	return pids
}

// A plugin in the plugin dir is launched by the daemon at its start, gets
// its configuration from the plugin config dir and the events; after a
// kill -9 of the daemon it ends with its connection, and the restarted
// daemon launches it again, synchronized with the recovered pod and
// container. A stopped daemon leaves no plugin running.
func TestNRILaunchedPluginSynchronizedAfterRestart(t *testing.T) {
	bin := buildNRIPlugin(t)
	d := NewDaemon(t)
	launched := filepath.Join(d.Dir, "nri-plugins", "10-e2e")
	events := filepath.Join(d.Dir, "nri-events")
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{launched, mustRead(t, bin), 0o755},
		{filepath.Join(d.Dir, "nri-conf.d", "10-e2e.conf"), []byte(events), 0o644},
	} {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.path, f.data, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, pid := range pluginProcesses(launched) {
			t.Errorf("launched NRI plugin %d outlived its daemon", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	d.Start()
	plugin := &nriPlugin{events: events}
	plugin.waitEvent(t, "Synchronize pods=0 containers=0")

	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("nri-launched")
	pod := d.runPod(t, podCfg)
	d.startContainer(t, pod, podCfg, runningContainer("kept", ref))
	plugin.waitEvent(t, "RunPodSandbox nri-launched")
	plugin.waitEvent(t, "StartContainer kept")

	old := pluginProcesses(launched)
	if len(old) != 1 {
		t.Fatalf("launched plugin processes %v, want one", old)
	}
	d.restart(t)
	waitFor(t, "the old daemon's launched plugin to end", 30*time.Second, func() bool {
		for _, pid := range old {
			if processRunning(pid) {
				return false
			}
		}
		return true
	})
	plugin.waitEvent(t, "Synchronize pods=1 containers=1")
	plugin.waitEvent(t, "synced-container kept CONTAINER_RUNNING pid=true")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// waitHeld waits until the plugin holds something whose line starts with
// "holding "+what+" ", and answers the rest of that line.
func (p *nriPlugin) waitHeld(t *testing.T, what string) string {
	t.Helper()
	prefix := "holding " + what + " "
	return strings.TrimPrefix(p.waitLine(t, "a hold of "+what, func(l string) bool { return strings.HasPrefix(l, prefix) }), prefix)
}

// While an NRI plugin holds a pod's RunPodSandbox (the hook hands it the
// pod's ID), CreateContainer on that ID fails at once, the sandbox not
// ready, and leaves nothing of the container; once RunPodSandbox has
// answered, the same create works (cri-tools' "should not start workload
// containers until RunPodSandbox hook completes").
func TestNRICreateContainerRefusedWhileRunPodSandboxHookHolds(t *testing.T) {
	bin := buildNRIPlugin(t)
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	release := filepath.Join(t.TempDir(), "release")
	plugin := startNRIPlugin(t, bin, d, "-adjust=false", "-hold-run-pod", release)
	plugin.waitEvent(t, "Synchronize pods=0 containers=0")

	podCfg := d.hostNetworkPod("held")
	type ran struct {
		id  string
		err error
	}
	done := make(chan ran, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		id, err := d.Runtime.RunPodSandbox(ctx, podCfg, "")
		done <- ran{id, err}
	}()
	podID := plugin.waitHeld(t, "RunPodSandbox held")
	var result ran
	released := false
	t.Cleanup(func() {
		if !released {
			_ = os.WriteFile(release, nil, 0o644)
			result = <-done
		}
		if result.id != "" {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = d.Runtime.StopPodSandbox(ctx, result.id)
			_ = d.Runtime.RemovePodSandbox(ctx, result.id)
		}
	})

	bundles := dirNames(filepath.Join(d.RunDir, "containers"))
	cfg := runningContainer("early", ref)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := d.Runtime.CreateContainer(ctx, podID, cfg, podCfg)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "not ready") {
		t.Errorf("CreateContainer while RunPodSandbox is held in a plugin: id %q, %v; want FailedPrecondition, not ready", id, err)
	}
	if after := dirNames(filepath.Join(d.RunDir, "containers")); len(after) != len(bundles) {
		t.Errorf("the refused create left a bundle: %v, before %v", after, bundles)
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	released = true
	select {
	case result = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("RunPodSandbox did not answer once the plugin released it")
	}
	if result.err != nil || result.id != podID {
		t.Fatalf("RunPodSandbox after the hook: %q, %v; want %s", result.id, result.err, podID)
	}
	if list, err := d.Runtime.ListContainers(ctx, nil); err != nil || len(list) != 0 {
		t.Errorf("containers after the refused create: %v, %v; want none", list, err)
	}
	d.createContainer(t, podID, podCfg, cfg)
}

// A container made while a late-joining plugin's Synchronize is held open
// (longer than the peers' 2s request timeout, as cri-tools holds it)
// reaches the plugin: in the Synchronize set or as a CreateContainer
// event, never neither (the NRI spec; cri-tools' "NRI plugin
// synchronization" specs).
func TestNRIContainerMadeDuringLateSyncReachesThePlugin(t *testing.T) {
	bin := buildNRIPlugin(t)
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("late-sync")
	podID := d.runPod(t, podCfg)
	d.startContainer(t, podID, podCfg, runningContainer("before", ref))

	release := filepath.Join(t.TempDir(), "release")
	plugin := startNRIPlugin(t, bin, d, "-adjust=false", "-hold-sync", release)
	plugin.waitEvent(t, "holding Synchronize")
	created := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := d.Runtime.CreateContainer(ctx, podID, runningContainer("during", ref), podCfg)
		created <- err
	}()
	time.Sleep(2500 * time.Millisecond) // the create in flight, the plugin past 2s
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	plugin.waitEvent(t, "released Synchronize")
	select {
	case err := <-created:
		if err != nil {
			t.Fatalf("CreateContainer during the plugin's Synchronize: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("CreateContainer during the plugin's Synchronize never answered")
	}
	d.createContainer(t, podID, podCfg, runningContainer("after", ref))
	plugin.waitEvent(t, "synced-container before CONTAINER_RUNNING pid=true")
	for _, name := range []string{"during", "after"} {
		plugin.waitLine(t, "container "+name+" (synchronized or created)", func(l string) bool {
			return l == "CreateContainer "+name || strings.HasPrefix(l, "synced-container "+name+" ")
		})
	}
}
