//go:build e2e

package e2e

import (
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/internal/procstat"
)

// monitorsOf lists the pids of the daemon's container monitors (not its
// infra processes), from their command lines.
func (d *Daemon) monitorsOf() []int {
	var pids []int
	procstat.EachCmdline(func(pid int, cmdline string) {
		if !strings.Contains(cmdline, d.RunDir+"/containers/") {
			return
		}
		// A monitor's flags come first; a join helper's and an exec
		// shim's command word does.
		if args := strings.Split(cmdline, "\x00"); len(args) > 1 && strings.HasPrefix(args[1], "--") && processRunning(pid) {
			pids = append(pids, pid)
		}
	})
	slices.Sort(pids)
	return pids
}

// TestMonitorShare: with the default monitor_share, three one-container
// pods and a second container of one of them all run under one monitor;
// each keeps its own log and exit status, and removing them leaves
// nothing. With monitor_share = 1 every container has a monitor of its own.
func TestMonitorShare(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		monitors int
	}{
		{"shared", nil, 1},
		{"own", []string{"--runtime-monitor-share", "1"}, 3}, // the one that exited took its monitor along
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := StartDaemon(t, WithArgs(tc.args...))
			img := busyboxRef(t)
			d.pull(t, img)
			var ids []string
			var firstPod string
			var firstCfg *runtime.PodSandboxConfig
			for i := 0; i < 3; i++ {
				cfg := d.hostNetworkPod("share" + strconv.Itoa(i))
				pod := d.runPod(t, cfg)
				if i == 0 {
					firstPod, firstCfg = pod, cfg
				}
				ids = append(ids, d.startContainer(t, pod, cfg, runningContainer("c", img)))
			}
			ids = append(ids, d.startContainer(t, firstPod, firstCfg, containerConfig("exits", img, "sh", "-c", "echo bye; exit 7")))
			for _, id := range ids[:3] {
				d.waitLogged(t, id, "ready")
			}
			st := d.waitExited(t, ids[3], 10*time.Second)
			if st.GetExitCode() != 7 || !strings.Contains(readLog(t, st.GetLogPath()), "bye") {
				t.Errorf("second container of a pod: exit %d, log %q; want 7 and its line", st.GetExitCode(), readLog(t, st.GetLogPath()))
			}
			if got := d.monitorsOf(); len(got) != tc.monitors {
				t.Errorf("%d monitor processes %v for 3 running containers, want %d", len(got), got, tc.monitors)
			}
			for _, id := range ids[:3] {
				if s := d.status(t, id); s.GetState() != runtime.ContainerState_CONTAINER_RUNNING {
					t.Errorf("container %s is %v after another in its monitor exited, want running", id, s.GetState())
				}
			}
			d.removeAll(t)
			d.assertNoLeaks(t, leakCheck{})
		})
	}
}

// TestSharedMonitorAcrossRestartAndKill: a container created after a
// daemon restart joins the monitor the records name, and a monitor killed
// with SIGKILL ends every container it served, each recorded as failed.
func TestSharedMonitorAcrossRestartAndKill(t *testing.T) {
	d := StartDaemon(t)
	img := busyboxRef(t)
	d.pull(t, img)
	cfg := d.hostNetworkPod("restart")
	pod := d.runPod(t, cfg)
	before := d.startContainer(t, pod, cfg, runningContainer("before", img))
	d.waitLogged(t, before, "ready")
	d.restart(t)
	after := d.startContainer(t, pod, cfg, runningContainer("after", img))
	d.waitLogged(t, after, "ready")
	monitors := d.monitorsOf()
	if len(monitors) != 1 || d.containerRecord(t, after).Monitor.PID != monitors[0] {
		t.Fatalf("monitors %v after a restart, want the one of the container before it", monitors)
	}

	if err := syscall.Kill(monitors[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{before, after} {
		st := d.waitExited(t, id, 15*time.Second)
		if st.GetReason() != "Error" || !strings.Contains(st.GetMessage(), "monitor") {
			t.Errorf("container %s after its monitor was killed: reason %q message %q", id, st.GetReason(), st.GetMessage())
		}
	}
	// The next container gets a new monitor.
	next := d.startContainer(t, pod, cfg, runningContainer("next", img))
	d.waitLogged(t, next, "ready")
	if got := d.monitorsOf(); len(got) != 1 || got[0] == monitors[0] {
		t.Errorf("monitors %v after the shared one was killed, want one new one", got)
	}
	d.removeAll(t)
	d.assertNoLeaks(t, leakCheck{pids: monitors})
}
