//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// Each crash test starts a daemon that kills itself with SIGKILL at one
// named step of an RPC (a test-only hook, see server/internal/lifecycle/crashpoint.go), starts
// it again on the same state, and checks the repair: half-made objects are
// rolled back or finished, never listed as healthy when they are not, and
// nothing is leaked.

// TestCrashDuringRunPodSandboxRollsBack cuts RunPodSandbox after each of its
// steps: record, namespace pins, infra process, CNI ADD, and just before the
// sandbox is ready.
func TestCrashDuringRunPodSandboxRollsBack(t *testing.T) {
	for _, point := range []string{"sandbox-after-record", "sandbox-after-pin", "sandbox-infra-unrecorded", "sandbox-after-infra", "sandbox-after-network", "sandbox-before-ready"} {
		t.Run(point, func(t *testing.T) {
			d := startDaemonCrashingAt(t, point)
			d.bridgeNetwork(t)
			cfg := d.podConfig("crash")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := d.Runtime.RunPodSandbox(ctx, cfg, ""); err == nil {
				t.Fatal("RunPodSandbox succeeded through its crash point")
			}
			d.waitCrashed(t, point)
			lc := leakCheck{}
			for _, r := range d.records(t, "sandboxes") {
				if r.State != "creating" {
					t.Errorf("record left by the crash is %q, want creating", r.State)
				}
				if r.Infra.PID > 0 {
					lc.pids = append(lc.pids, r.Infra.PID)
				}
			}
			lc.pids = append(lc.pids, d.infraProcesses(t)...)
			// Started, unknown to the sandbox record: only its pod dir's
			// record names it.
			if point == "sandbox-infra-unrecorded" && len(lc.pids) == 0 {
				t.Fatalf("no infra process found after the crash at %s", point)
			}

			d.Start()
			pods, err := d.Runtime.ListPodSandbox(ctx, nil)
			if err != nil || len(pods) != 0 {
				t.Fatalf("after the repair: %d sandboxes listed (%v), want the half-made one rolled back", len(pods), err)
			}
			d.assertNoLeaks(t, lc)
			// The name is free again, and the node makes pods as before.
			d.runPod(t, cfg)
		})
	}
}

// TestCrashDuringCreateContainerRollsBack cuts CreateContainer after its
// record, after its root filesystem and bundle, and after its monitor ran
// the runtime's create.
func TestCrashDuringCreateContainerRollsBack(t *testing.T) {
	ref := busyboxRef(t)
	for _, point := range []string{"container-after-record", "container-after-bundle", "container-after-monitor"} {
		t.Run(point, func(t *testing.T) {
			d := startDaemonCrashingAt(t, point)
			d.pull(t, ref)
			cfg := d.hostNetworkPod("crash")
			pod := d.runPod(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cc := containerConfig("c", ref, "sh", "-c", "echo made-after-repair")
			if _, err := d.Runtime.CreateContainer(ctx, pod, cc, cfg); err == nil {
				t.Fatal("CreateContainer succeeded through its crash point")
			}
			d.waitCrashed(t, point)

			d.Start()
			if cs, err := d.Runtime.ListContainers(ctx, nil); err != nil || len(cs) != 0 {
				t.Fatalf("after the repair: %d containers listed (%v), want the half-made one rolled back", len(cs), err)
			}
			if state, _ := d.podState(t, pod); state != runtime.PodSandboxState_SANDBOX_READY {
				t.Errorf("the pod is %v after the repair, want READY", state)
			}
			d.assertNoContainerLeft(t)
			// The name is free again, and the container runs.
			st, log := d.runToExit(t, pod, cfg, cc)
			if st.GetExitCode() != 0 || log != "made-after-repair\n" {
				t.Errorf("container made after the repair: exit %d, log %q", st.GetExitCode(), log)
			}
			// Removed here, not by runPod's cleanup: the pod's infra process
			// outlived the first daemon, so init reaps it, a moment after
			// it died, and that check takes the zombie for a live process.
			d.removeAll(t)
			d.assertNoLeaks(t, leakCheck{})
		})
	}
}

// assertNoContainerLeft checks the container side of the state only: no
// bundle, rootfs, runtime state, monitor or mount; the pod itself stays.
func (d *Daemon) assertNoContainerLeft(t *testing.T) {
	t.Helper()
	for _, dir := range []string{filepath.Join(d.RunDir, "containers"), filepath.Join(d.Root, "image", "snapshots"), filepath.Join(d.Root, "containers")} {
		if names := dirNames(dir); len(names) > 0 {
			t.Errorf("left in %s: %v", dir, names)
		}
	}
	if states, _ := filepath.Glob(filepath.Join(d.RunDir, "runtime", "*", "*")); len(states) > 0 {
		t.Errorf("runtime state left: %v", states)
	}
	waitFor(t, "no monitor and no rootfs mount", 10*time.Second, func() bool {
		for _, l := range d.leaks(leakCheck{}) {
			if strings.HasPrefix(l, "process") || strings.Contains(l, "snapshots") {
				return false
			}
		}
		return true
	})
}

// TestCrashAfterStartContainerRecordsItRunning cuts StartContainer after
// the runtime started the process and before the record says so: the
// repaired daemon must list it running (a second start would fail), and
// stop and remove it.
func TestCrashAfterStartContainerRecordsItRunning(t *testing.T) {
	d := startDaemonCrashingAt(t, "container-after-start")
	ref := busyboxRef(t)
	d.pull(t, ref)
	cfg := d.hostNetworkPod("crash")
	pod := d.runPod(t, cfg)
	id := d.createContainer(t, pod, cfg, runningContainer("c", ref))
	ctx := context.Background()
	if err := d.Runtime.StartContainer(ctx, id); err == nil {
		t.Fatal("StartContainer succeeded through its crash point")
	}
	d.waitCrashed(t, "container-after-start")
	d.Start()
	st := d.status(t, id)
	if st.GetState() != runtime.ContainerState_CONTAINER_RUNNING || st.GetStartedAt() < st.GetCreatedAt() {
		t.Fatalf("after the repair: %v, started %d, created %d; want RUNNING, started after created", st.GetState(), st.GetStartedAt(), st.GetCreatedAt())
	}
	if out, ok := d.execSync(t, id, "echo", "alive"); ok && out != "alive\n" {
		t.Errorf("exec in the recovered container: %q", out)
	}
	if err := d.Runtime.StopContainer(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	if st := d.status(t, id); st.GetState() != runtime.ContainerState_CONTAINER_EXITED || st.GetExitCode() != 128+int32(syscall.SIGKILL) {
		t.Errorf("after stop: %v, exit %d", st.GetState(), st.GetExitCode())
	}
	d.removeAll(t)
	d.assertNoLeaks(t, leakCheck{})
}

// TestCrashDuringStopContainerRecordsTheExit cuts StopContainer right after
// the stop signal: the container exits while the daemon is down, and the
// repaired daemon reports that exit.
func TestCrashDuringStopContainerRecordsTheExit(t *testing.T) {
	d := startDaemonCrashingAt(t, "container-stop-after-signal")
	ref := busyboxRef(t)
	d.pull(t, ref)
	cfg := d.hostNetworkPod("crash")
	pod := d.runPod(t, cfg)
	id := d.startContainer(t, pod, cfg, containerConfig("c", ref, "sh", "-c", "trap 'echo got TERM; exit 3' TERM; echo ready; while true; do usleep 20000; done"))
	d.waitLogged(t, id, "ready")
	if err := d.Runtime.StopContainer(context.Background(), id, 30); err == nil {
		t.Fatal("StopContainer succeeded through its crash point")
	}
	d.waitCrashed(t, "container-stop-after-signal")
	d.Start()
	st := d.waitExited(t, id, 10*time.Second)
	if st.GetExitCode() != 3 || st.GetReason() != "Error" || !strings.Contains(readLog(t, st.GetLogPath()), "got TERM") {
		t.Errorf("after the repair: exit %d, reason %q, log %q; want the container's own exit 3", st.GetExitCode(), st.GetReason(), readLog(t, st.GetLogPath()))
	}
	d.removeAll(t)
	d.assertNoLeaks(t, leakCheck{})
}

// TestCrashDuringRemoveContainerFinishesOnRetry cuts RemoveContainer after
// the stop and just before the record goes: the container is listed exited
// (it is), and the kubelet's retry removes it.
func TestCrashDuringRemoveContainerFinishesOnRetry(t *testing.T) {
	ref := busyboxRef(t)
	for _, point := range []string{"container-remove-after-stop", "container-discard-before-record-delete"} {
		t.Run(point, func(t *testing.T) {
			d := startDaemonCrashingAt(t, point)
			d.pull(t, ref)
			cfg := d.hostNetworkPod("crash")
			pod := d.runPod(t, cfg)
			id := d.startContainer(t, pod, cfg, runningContainer("c", ref))
			ctx := context.Background()
			if err := d.Runtime.RemoveContainer(ctx, id); err == nil {
				t.Fatal("RemoveContainer succeeded through its crash point")
			}
			d.waitCrashed(t, point)
			d.Start()
			if st := d.status(t, id); st.GetState() != runtime.ContainerState_CONTAINER_EXITED {
				t.Errorf("after the repair: %v, want EXITED", st.GetState())
			}
			if err := d.Runtime.RemoveContainer(ctx, id); err != nil {
				t.Fatalf("RemoveContainer retried after the repair: %v", err)
			}
			d.assertNoContainerLeft(t)
			d.removeAll(t)
			d.assertNoLeaks(t, leakCheck{})
		})
	}
}

// TestCrashDuringRemovePodSandboxFinishesOnRetry cuts RemovePodSandbox (of a
// pod that was not stopped first, as `crictl rmp -f` does) after its
// containers went, after CNI DEL, and after every resource was released. A
// pod that lost its network or namespaces must not be listed ready; the
// retry removes it and frees everything.
func TestCrashDuringRemovePodSandboxFinishesOnRetry(t *testing.T) {
	ref := busyboxRef(t)
	cases := []struct {
		point     string
		wantReady bool // the pod is still whole at this point
	}{
		{"sandbox-remove-after-containers", true},
		{"sandbox-release-after-cni-del", false},
		{"sandbox-remove-after-release", false},
	}
	for _, c := range cases {
		t.Run(c.point, func(t *testing.T) {
			d := startDaemonCrashingAt(t, c.point)
			d.pull(t, ref)
			d.bridgeNetwork(t)
			cfg := d.podConfig("crash")
			pod := d.runPod(t, cfg)
			d.startContainer(t, pod, cfg, runningContainer("c", ref))
			lc := leakCheck{pids: []int{d.infraProcess(t, pod)}}
			ctx := context.Background()
			if err := d.Runtime.RemovePodSandbox(ctx, pod); err == nil {
				t.Fatal("RemovePodSandbox succeeded through its crash point")
			}
			d.waitCrashed(t, c.point)
			d.Start()
			state, _ := d.podState(t, pod)
			if ready := state == runtime.PodSandboxState_SANDBOX_READY; ready != c.wantReady {
				t.Errorf("after the repair the pod is %v, want ready=%v", state, c.wantReady)
			}
			if err := d.Runtime.RemovePodSandbox(ctx, pod); err != nil {
				t.Fatalf("RemovePodSandbox retried after the repair: %v", err)
			}
			d.assertNoLeaks(t, lc)
		})
	}
}

// TestCrashDuringPullImageLeavesNoImage kills the daemon while a layer is
// half downloaded (a proxy holds the download there), restarts it, and
// checks that no image is listed, the half-written files are gone, and the
// next pull of the same image works and runs.
func TestCrashDuringPullImageLeavesNoImage(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	testimage.Push(t, testimage.Busybox(t), reg.Host()+"/e2e/busybox:latest")
	proxy := startStallProxy(t, reg.Host())
	ref := proxy.host() + "/e2e/busybox:latest"
	d := StartDaemon(t)

	proxy.stallLayers()
	pulled := make(chan error, 1)
	go func() {
		_, err := d.Images.PullImage(context.Background(), &runtime.ImageSpec{Image: ref}, nil, nil)
		pulled <- err
	}()
	proxy.waitStalled(t)
	d.kill9(t)
	if err := <-pulled; err == nil {
		t.Fatal("the pull succeeded although the daemon was killed during it")
	}
	proxy.unstall()
	partial := d.filesBelowImageTmp()
	if len(partial) == 0 {
		t.Logf("no partial download on disk after the kill (the store may stream to memory first)")
	}

	d.Start()
	resp, err := d.Images.ImageStatus(context.Background(), &runtime.ImageSpec{Image: ref}, false)
	if err != nil || resp.GetImage() != nil {
		t.Fatalf("ImageStatus after a cut pull: %v, %v; want no image", resp.GetImage(), err)
	}
	// The image store's collection runs a second after the restart
	// (server.runAfterStart), after the socket answers.
	waitFor(t, "the half-written files of the cut pull removed after the restart", 30*time.Second, func() bool {
		return len(d.filesBelowImageTmp()) == 0
	})
	t.Logf("partial files before the restart: %v", partial)
	d.pull(t, ref)
	cfg := d.hostNetworkPod("after-pull")
	pod := d.runPod(t, cfg)
	if st, log := d.runToExit(t, pod, cfg, containerConfig("c", ref, "sh", "-c", "echo pulled-whole")); st.GetExitCode() != 0 || log != "pulled-whole\n" {
		t.Errorf("container from the re-pulled image: exit %d, log %q", st.GetExitCode(), log)
	}
}

// TestMonitorKilledShowsContainerExited kills a running container's monitor
// with SIGKILL: nobody reaps or logs for the container any more, so it is
// killed and shown exited with a reason, and the daemon goes on answering.
func TestMonitorKilledShowsContainerExited(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	cfg := d.hostNetworkPod("monitor")
	pod := d.runPod(t, cfg)
	ctx := context.Background()

	check := func(t *testing.T, id string, containerPID int) {
		t.Helper()
		st := d.waitExited(t, id, 15*time.Second)
		if st.GetExitCode() != 128+int32(syscall.SIGKILL) || st.GetReason() == "" || !strings.Contains(st.GetMessage(), "monitor") {
			t.Errorf("exit %d, reason %q, message %q; want 137 with a reason and a message naming the monitor", st.GetExitCode(), st.GetReason(), st.GetMessage())
		}
		waitFor(t, "the orphaned container process to be killed", 10*time.Second, func() bool { return !processRunning(containerPID) })
		if err := d.Runtime.StopContainer(ctx, id, 0); err != nil {
			t.Errorf("StopContainer after the monitor died: %v", err)
		}
		if err := d.Runtime.RemoveContainer(ctx, id); err != nil {
			t.Errorf("RemoveContainer after the monitor died: %v", err)
		}
	}

	t.Run("while the daemon runs", func(t *testing.T) {
		id := d.startContainer(t, pod, cfg, runningContainer("live", ref))
		d.waitLogged(t, id, "ready")
		monitor, pid := d.containerRecord(t, id).Monitor.PID, d.containerPID(t, id)
		if err := syscall.Kill(monitor, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		check(t, id, pid)
		if _, err := d.Runtime.Version(ctx, "v1"); err != nil || time.Since(start) > 30*time.Second {
			t.Errorf("daemon after a monitor died: %v after %s", err, time.Since(start))
		}
	})

	t.Run("while the daemon is down", func(t *testing.T) {
		id := d.startContainer(t, pod, cfg, runningContainer("down", ref))
		d.waitLogged(t, id, "ready")
		monitor, pid := d.containerRecord(t, id).Monitor.PID, d.containerPID(t, id)
		d.kill9(t)
		if err := syscall.Kill(monitor, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the monitor to go", 10*time.Second, func() bool { return !processRunning(monitor) })
		d.Start()
		check(t, id, pid)
	})

	d.removeAll(t)
	d.assertNoLeaks(t, leakCheck{})
}

// TestDiskFullFailsCleanly fills the state root (a small tmpfs): calls that
// must write answer an error that says so and leave nothing half-made; a
// container that exits meanwhile is still seen to exit; once space is back,
// everything works, across a restart too.
func TestDiskFullFailsCleanly(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	img := testimage.Busybox(t)
	ref, ref2 := reg.Host()+"/e2e/busybox:latest", reg.Host()+"/e2e/other:latest"
	testimage.Push(t, img, ref)
	testimage.Push(t, img, ref2)
	d := NewDaemon(t)
	mountTmpfs(t, d.Root, "64m")
	d.Start()
	d.pull(t, ref)
	cfg := d.hostNetworkPod("full")
	pod := d.runPod(t, cfg)
	running := d.startContainer(t, pod, cfg, containerConfig("c", ref, "sh", "-c", "trap 'exit 5' TERM; echo ready; while true; do usleep 20000; done"))
	d.waitLogged(t, running, "ready")
	ctx := context.Background()
	before := d.stateFiles(t)

	filler := fillDisk(t, d.Root)
	wantFull := func(what string, err error) {
		t.Helper()
		t.Logf("%s: %v", what, err)
		if err == nil || !strings.Contains(err.Error(), "no space left on device") {
			t.Errorf("%s on a full disk: %v, want an error saying the disk is full", what, err)
		}
	}
	_, err := d.Runtime.RunPodSandbox(ctx, d.hostNetworkPod("refused"), "")
	wantFull("RunPodSandbox", err)
	_, err = d.Runtime.CreateContainer(ctx, pod, containerConfig("refused", ref, "true"), cfg)
	wantFull("CreateContainer", err)
	_, err = d.Images.PullImage(ctx, &runtime.ImageSpec{Image: ref2}, nil, nil)
	wantFull("PullImage", err)
	if after := d.stateFiles(t); after != before {
		t.Errorf("failed calls changed the state:\nbefore: %s\nafter:  %s", before, after)
	}
	if err := d.Runtime.StopContainer(ctx, running, 10); err != nil {
		t.Errorf("StopContainer on a full disk: %v", err)
	}
	if st := d.status(t, running); st.GetState() != runtime.ContainerState_CONTAINER_EXITED || st.GetExitCode() != 5 {
		t.Errorf("stopped on a full disk: %v, exit %d; want EXITED, 5", st.GetState(), st.GetExitCode())
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	d.restart(t)
	if st := d.status(t, running); st.GetState() != runtime.ContainerState_CONTAINER_EXITED || st.GetExitCode() != 5 {
		t.Errorf("after the restart: %v, exit %d; want EXITED, 5", st.GetState(), st.GetExitCode())
	}
	d.pull(t, ref2)
	if st, _ := d.runToExit(t, pod, cfg, containerConfig("after", ref2, "true")); st.GetExitCode() != 0 {
		t.Errorf("container once space is back: exit %d", st.GetExitCode())
	}
	d.runPod(t, d.hostNetworkPod("after"))
	d.removeAll(t)
	d.assertNoLeaks(t, leakCheck{ownMounts: []string{d.Root}})
}

// TestDiskReadOnlyStateFailsCleanly makes the record directories read-only:
// creates fail with an error that says so and leave nothing; once writable
// again, the same calls work.
func TestDiskReadOnlyStateFailsCleanly(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	cfg := d.hostNetworkPod("ro")
	pod := d.runPod(t, cfg)
	ctx := context.Background()
	before := d.stateFiles(t)

	undoSandboxes := bindReadOnly(t, filepath.Join(d.Root, "sandboxes"))
	undoContainers := bindReadOnly(t, filepath.Join(d.Root, "containers"))
	wantRO := func(what string, err error) {
		t.Helper()
		t.Logf("%s: %v", what, err)
		if err == nil || !strings.Contains(err.Error(), "read-only file system") {
			t.Errorf("%s on a read-only state dir: %v, want an error saying so", what, err)
		}
	}
	newPod := d.hostNetworkPod("refused")
	_, err := d.Runtime.RunPodSandbox(ctx, newPod, "")
	wantRO("RunPodSandbox", err)
	cc := containerConfig("refused", ref, "true")
	_, err = d.Runtime.CreateContainer(ctx, pod, cc, cfg)
	wantRO("CreateContainer", err)
	if after := d.stateFiles(t); after != before {
		t.Errorf("failed calls changed the state:\nbefore: %s\nafter:  %s", before, after)
	}
	d.assertNoContainerLeft(t)

	undoContainers()
	undoSandboxes()
	d.runPod(t, newPod)
	if st, _ := d.runToExit(t, pod, cfg, cc); st.GetExitCode() != 0 {
		t.Errorf("container once writable again: exit %d", st.GetExitCode())
	}
	d.removeAll(t)
	d.assertNoLeaks(t, leakCheck{})
}

// stateFiles summarises the daemon's records, pod dirs, bundles, root
// filesystems and image temp files, to compare before and after a call.
func (d *Daemon) stateFiles(t *testing.T) string {
	t.Helper()
	var parts []string
	for _, dir := range []string{
		filepath.Join(d.Root, "sandboxes"), filepath.Join(d.Root, "containers"),
		filepath.Join(d.RunDir, "pods"), filepath.Join(d.RunDir, "containers"),
		filepath.Join(d.Root, "image", "snapshots"), filepath.Join(d.Root, "image", "tmp"),
	} {
		parts = append(parts, filepath.Base(filepath.Dir(dir))+"/"+filepath.Base(dir)+"="+strings.Join(dirNames(dir), ","))
	}
	return strings.Join(parts, " ")
}

// filesBelowImageTmp lists the files in the image store's temp dir, where
// downloads and unpacks are written before they are moved in place.
func (d *Daemon) filesBelowImageTmp() []string {
	var files []string
	root := filepath.Join(d.Root, "image", "tmp")
	_ = filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			files = append(files, strings.TrimPrefix(p, root+"/"))
		}
		return nil
	})
	return files
}
