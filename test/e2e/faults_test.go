//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
)

const (
	faultLoad    = 25 * time.Second
	faultWorkers = 4
)

// TestFaultsUnderLoadLeaveNothing creates, execs into and removes pods from
// several goroutines for a while, and meanwhile SIGKILLs the daemon (and
// restarts it) and, separately, SIGKILLs monitors. Calls fail during the
// faults, as they would for the kubelet, which retries. What is asserted is
// the end: after a clean restart and the removal of every pod, nothing of
// them is left: mounts (rootfs, namespace pins), processes, cgroups,
// records, bundles, rootfs dirs, IP allocations and veths.
func TestFaultsUnderLoadLeaveNothing(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	d.bridgeNetwork(t)
	bridge := d.bridgeName(t)

	// Workers take the current client; the restarts below replace it.
	var clientMu sync.RWMutex
	client := func() internalapi.RuntimeService {
		clientMu.RLock()
		defer clientMu.RUnlock()
		return d.Runtime
	}

	stop := make(chan struct{})
	var (
		wg                    sync.WaitGroup
		cycles, failed, execs atomic.Int64
		monitorsKilled        atomic.Int64
	)
	for w := range faultWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ok, execOK := d.faultCycle(client, fmt.Sprintf("fault-%d-%d", w, i), ref)
				cycles.Add(1)
				if !ok {
					failed.Add(1)
				}
				if execOK {
					execs.Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(1000+rand.IntN(1500)) * time.Millisecond):
			}
			if pids := d.monitorPIDs(); len(pids) > 0 {
				if syscall.Kill(pids[rand.IntN(len(pids))], syscall.SIGKILL) == nil {
					monitorsKilled.Add(1)
				}
			}
		}
	}()

	// The daemon's kills and restarts, on the test's goroutine: Start fails
	// the test if the daemon does not come back.
	restarts := 0
	end := time.Now().Add(faultLoad)
	for time.Now().Before(end) {
		time.Sleep(time.Duration(2000+rand.IntN(3000)) * time.Millisecond)
		clientMu.Lock()
		d.restart(t)
		clientMu.Unlock()
		restarts++
	}
	close(stop)
	wg.Wait()
	t.Logf("%s: %d pod cycles (%d with a failed call, %d execs answered), %d daemon kills, %d monitor kills",
		faultLoad, cycles.Load(), failed.Load(), execs.Load(), restarts, monitorsKilled.Load())
	if cycles.Load()-failed.Load() == 0 {
		t.Errorf("no pod cycle went through: the load did not run")
	}

	// A clean restart, then the kubelet's removal of everything.
	d.Signal(syscall.SIGTERM)
	d.Wait(30 * time.Second)
	d.Start()
	d.removeAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if pods, err := d.Runtime.ListPodSandbox(ctx, nil); err != nil || len(pods) != 0 {
		t.Errorf("after the removal: %d sandboxes (%v), want none", len(pods), err)
	}
	if cs, err := d.Runtime.ListContainers(ctx, nil); err != nil || len(cs) != 0 {
		t.Errorf("after the removal: %d containers (%v), want none", len(cs), err)
	}
	d.assertNoLeaks(t, leakCheck{})
	waitFor(t, "the bridge's veths to go", 10*time.Second, func() bool { return len(dirNames(filepath.Join("/sys/class/net", bridge, "brif"))) == 0 })
}

// faultCycle runs one pod through its life, giving up at the first failed
// call: the end state is what the test checks, not each call. ok is false
// when a call failed; execOK is true when ExecSync answered.
func (d *Daemon) faultCycle(client func() internalapi.RuntimeService, name, ref string) (ok, execOK bool) {
	call := func(f func(ctx context.Context, rt internalapi.RuntimeService) error) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		return f(ctx, client()) == nil
	}
	cfg := d.podConfig(name)
	var pod, id string
	if !call(func(ctx context.Context, rt internalapi.RuntimeService) (err error) {
		pod, err = rt.RunPodSandbox(ctx, cfg, "")
		return err
	}) {
		return false, false
	}
	ok = call(func(ctx context.Context, rt internalapi.RuntimeService) (err error) {
		id, err = rt.CreateContainer(ctx, pod, runningContainer("c", ref), cfg)
		return err
	}) && call(func(ctx context.Context, rt internalapi.RuntimeService) error {
		return rt.StartContainer(ctx, id)
	})
	if ok {
		execOK = call(func(ctx context.Context, rt internalapi.RuntimeService) error {
			_, _, err := rt.ExecSync(ctx, id, []string{"hostname"}, 5*time.Second)
			return err
		})
		ok = execOK
	}
	removed := call(func(ctx context.Context, rt internalapi.RuntimeService) error {
		return rt.StopPodSandbox(ctx, pod)
	}) && call(func(ctx context.Context, rt internalapi.RuntimeService) error {
		return rt.RemovePodSandbox(ctx, pod)
	})
	return ok && removed, execOK
}

// monitorPIDs lists the daemon's container monitors (and join helpers):
// minicri-conmon processes of its run dir that are no exec shim or infra
// process.
func (d *Daemon) monitorPIDs() []int {
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(cmdline), d.RunDir) {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if filepath.Base(args[0]) != "minicri-conmon" || len(args) > 1 && (args[1] == "exec" || args[1] == "pause") {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// bridgeName is the bridge of the daemon's CNI network (bridgeNetwork).
func (d *Daemon) bridgeName(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(d.Dir, "cni", "10-e2e.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []struct {
			Bridge string `json:"bridge"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &conf); err != nil || len(conf.Plugins) == 0 || conf.Plugins[0].Bridge == "" {
		t.Fatalf("no bridge in the CNI config: %v", err)
	}
	return conf.Plugins[0].Bridge
}

// TestCrashDuringASlowCreateLeavesNothing kills the daemon while a monitor's
// create is still under way (a runtime that takes 3 s to begin its create):
// the restarted daemon rolls the container back, and the create must not
// finish behind its back and leave a container, its runtime state and its
// monitor that nothing names. TestFaultsUnderLoadLeaveNothing found this
// as a runtime state directory left, one run in five.
func TestCrashDuringASlowCreateLeavesNothing(t *testing.T) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Skip("no runc")
	}
	mark := filepath.Join(t.TempDir(), "creating")
	d := startWithRuntimeWrapper(t, fmt.Sprintf("#!/bin/sh\nfor a; do if [ \"$a\" = create ]; then : > %s; sleep 3; break; fi; done\nexec %s \"$@\"\n", mark, runc))
	ref := busyboxRef(t)
	d.pull(t, ref)
	cfg := d.hostNetworkPod("slow")
	pod := d.runPod(t, cfg)
	rt := d.Runtime // the restart below replaces d.Runtime
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = rt.CreateContainer(ctx, pod, runningContainer("c", ref), cfg) // cut by the kill
	}()
	waitFor(t, "the runtime's create to begin", 20*time.Second, func() bool { _, err := os.Stat(mark); return err == nil })
	began := time.Now()
	d.kill9(t)
	d.Start()
	// Past the moment the create would have finished.
	time.Sleep(time.Until(began.Add(5 * time.Second)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if cs, err := d.Runtime.ListContainers(ctx, nil); err != nil || len(cs) != 0 {
		t.Errorf("after the repair: %d containers listed (%v), want the half-made one rolled back", len(cs), err)
	}
	d.assertNoContainerLeft(t)
	d.removeAll(t)
	d.assertNoLeaks(t, leakCheck{})
}

// TestCutCreateLeavesNoStrandedInit: a runtime's create killed after it
// started the container's init and before it wrote state.json leaves that
// init waiting on its exec fifo, in the pod's cgroup and namespaces, and
// the runtime's delete does not know it. Whether the daemon dies with the
// create in flight (the next daemon rolls it back) or the monitor does (the
// daemon undoes the create at once), the init is found by its exec fifo
// and removed with its cgroup. A runtime wrapper makes that state for sure:
// it runs the real create, then removes state.json and hangs, as a create
// killed at that point would have left it.
func TestCutCreateLeavesNoStrandedInit(t *testing.T) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Skip("no runc")
	}
	for _, tc := range []struct {
		name string
		cut  func(t *testing.T, d *Daemon)
	}{
		{"daemon killed", func(t *testing.T, d *Daemon) {
			d.kill9(t)
			d.Start()
		}},
		{"monitor killed", func(t *testing.T, d *Daemon) {
			pids := d.monitorPIDs()
			if len(pids) != 1 {
				t.Fatalf("%d monitors, want the one of the create in flight", len(pids))
			}
			if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mark := filepath.Join(t.TempDir(), "stranded")
			d := startWithRuntimeWrapper(t, fmt.Sprintf(`#!/bin/sh
root= prev= id= create=
for a; do
	[ "$prev" = --root ] && root=$a
	[ "$a" = create ] && create=1
	prev=$a id=$a
done
[ -n "$create" ] || exec %[1]s "$@"
%[1]s "$@" || exit $?
rm -f "$root/$id/state.json"
: > %[2]s
exec sleep 60
`, runc, mark))
			ref := busyboxRef(t)
			d.pull(t, ref)
			cfg := d.hostNetworkPod("cut")
			pod := d.runPod(t, cfg)
			rt := d.Runtime // a restart replaces d.Runtime
			created := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
				defer cancel()
				_, err := rt.CreateContainer(ctx, pod, runningContainer("c", ref), cfg)
				created <- err
			}()
			waitFor(t, "the runtime's create to leave its init without state", 30*time.Second, func() bool { _, err := os.Stat(mark); return err == nil })
			if inits := d.strandedInits(); len(inits) == 0 {
				t.Fatal("no init waits on an exec fifo: the wrapper did not make the state under test")
			}
			tc.cut(t, d)
			select {
			case err := <-created:
				if err == nil {
					t.Fatal("CreateContainer succeeded though its create was cut")
				}
			case <-time.After(45 * time.Second):
				t.Fatal("CreateContainer still running 45 s after its create was cut")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if cs, err := d.Runtime.ListContainers(ctx, nil); err != nil || len(cs) != 0 {
				t.Errorf("%d containers listed (%v), want the cut one gone", len(cs), err)
			}
			d.assertNoContainerLeft(t)
			if inits := d.strandedInits(); len(inits) > 0 {
				t.Errorf("stranded inits left:\n  %s", strings.Join(inits, "\n  "))
			}
			d.removeAll(t)
			d.assertNoLeaks(t, leakCheck{})
		})
	}
}

// startWithRuntimeWrapper starts a daemon whose runc handler runs script, a
// shell wrapper of the real runc that a test makes misbehave.
func startWithRuntimeWrapper(t *testing.T, script string) *Daemon {
	t.Helper()
	wrapper := filepath.Join(t.TempDir(), "runc-wrapper")
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return StartDaemon(t, WithConfig(fmt.Sprintf("[runtime.handlers.runc]\npath = %q\n", wrapper)))
}
