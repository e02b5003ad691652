//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/tools/remotecommand"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// counterScript logs 1, 2, 3, ... every 20 ms, for as long as it runs.
const counterScript = "i=0; while true; do i=$((i+1)); echo $i; usleep 20000; done"

// TestRestartAfterKill9KeepsPodsAndContainers kills the daemon with three
// pods running, lets one container exit while it is down, and checks that
// the restarted daemon has everything as it is: states, exit code and time,
// IPs and namespaces, logs without a gap, exec, names; then that stop and
// remove of the recovered objects leave nothing behind.
func TestRestartAfterKill9KeepsPodsAndContainers(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	d.bridgeNetwork(t)
	ctx := context.Background()
	shared := t.TempDir()

	cfgA, cfgB, cfgC := d.podConfig("restart-a"), d.podConfig("restart-b"), d.podConfig("restart-c")
	podA, podB, podC := d.runPod(t, cfgA), d.runPod(t, cfgB), d.runPod(t, cfgC)
	counter := d.startContainer(t, podA, cfgA, containerConfig("counter", ref, "sh", "-c", counterScript))
	idle := d.startContainer(t, podA, cfgA, runningContainer("idle", ref))
	waiterCfg := containerConfig("waiter", ref, "sh", "-c", "echo ready; while [ ! -e /shared/go ]; do usleep 20000; done; echo bye; exit 7")
	waiterCfg.Mounts = []*runtime.Mount{{ContainerPath: "/shared", HostPath: shared}}
	waiter := d.startContainer(t, podB, cfgB, waiterCfg)
	readerCfg := containerConfig("reader", ref, "sh", "-c", "echo ready; while read line; do echo got:$line; done")
	readerCfg.Stdin = true
	reader := d.startContainer(t, podB, cfgB, readerCfg)
	listener := d.startContainer(t, podC, cfgC, containerConfig("listen", ref, "sh", "-c", "echo ready; while true; do sleep 1; done | nc -l -p 8080"))
	for _, id := range []string{idle, waiter, listener, reader} {
		d.waitLogged(t, id, "ready")
	}
	counterLog := d.status(t, counter).GetLogPath()
	waitFor(t, "the counter to log", 10*time.Second, func() bool { return len(numbersIn(t, counterLog)) >= 10 })

	ips := map[string]string{}
	infra := leakCheck{}
	for _, pod := range []string{podA, podB, podC} {
		_, ips[pod] = d.podState(t, pod)
		if pid := d.infraProcess(t, pod); pid != 0 {
			infra.pids = append(infra.pids, pid)
		}
	}
	started := d.status(t, counter).GetStartedAt()
	oldExecURL := d.execURL(t, &runtime.ExecRequest{ContainerId: idle, Cmd: []string{"true"}, Stdout: true})

	killedAt := time.Now()
	d.kill9(t)

	// Logs keep flowing while the daemon is down: the monitor writes them.
	before := len(numbersIn(t, counterLog))
	waitFor(t, "the counter to log while the daemon is down", 10*time.Second, func() bool { return len(numbersIn(t, counterLog)) > before+10 })
	// The waiter exits while the daemon is down: its monitor records the exit.
	if err := os.WriteFile(filepath.Join(shared, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the waiter's exit file", 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(d.RunDir, "containers", waiter, "exit"))
		return err == nil
	})
	restartedAt := time.Now()
	d.Start()

	t.Run("sandboxes keep their state, IPs and namespaces", func(t *testing.T) {
		for _, pod := range []string{podA, podB, podC} {
			state, ip := d.podState(t, pod)
			if state != runtime.PodSandboxState_SANDBOX_READY || ip != ips[pod] || ip == "" {
				t.Errorf("pod %s: %v with IP %q, want READY with %q", pod, state, ip, ips[pod])
			}
			for _, ns := range []string{"net", "ipc", "uts"} {
				var st unix.Statfs_t
				pin := filepath.Join(d.RunDir, "pods", pod, "ns", ns)
				if err := unix.Statfs(pin, &st); err != nil || st.Type != unix.NSFS_MAGIC {
					t.Errorf("pod %s: %s namespace no longer pinned at %s (%v)", pod, ns, pin, err)
				}
			}
		}
		for _, pid := range infra.pids {
			if !processRunning(pid) {
				t.Errorf("infra process %d did not survive the restart", pid)
			}
		}
	})

	t.Run("running containers are listed running", func(t *testing.T) {
		for _, id := range []string{counter, idle, listener, reader} {
			st := d.status(t, id)
			if st.GetState() != runtime.ContainerState_CONTAINER_RUNNING {
				t.Errorf("container %s: %v, want RUNNING", id, st.GetState())
			}
		}
		if got := d.status(t, counter).GetStartedAt(); got != started {
			t.Errorf("counter's start time changed over the restart: %d, was %d", got, started)
		}
		running, err := d.Runtime.ListContainers(ctx, &runtime.ContainerFilter{State: &runtime.ContainerStateValue{State: runtime.ContainerState_CONTAINER_RUNNING}})
		if err != nil || len(running) != 4 {
			t.Errorf("ListContainers(running) = %d containers, %v; want 4", len(running), err)
		}
	})

	t.Run("a container that exited while down has its real exit", func(t *testing.T) {
		st := d.status(t, waiter)
		if st.GetState() != runtime.ContainerState_CONTAINER_EXITED || st.GetExitCode() != 7 || st.GetReason() != "Error" {
			t.Errorf("waiter: %v, exit %d, reason %q; want EXITED, 7, Error", st.GetState(), st.GetExitCode(), st.GetReason())
		}
		if f := time.Unix(0, st.GetFinishedAt()); f.Before(killedAt) || f.After(restartedAt) {
			t.Errorf("waiter finished at %v, not while the daemon was down (%v .. %v)", f, killedAt, restartedAt)
		}
		if log := readLog(t, st.GetLogPath()); !strings.Contains(log, "bye\n") {
			t.Errorf("waiter's log lacks what it wrote while the daemon was down: %q", log)
		}
	})

	t.Run("names stay reserved", func(t *testing.T) {
		_, err := d.Runtime.RunPodSandbox(ctx, cfgA, "")
		if status.Code(err) != codes.AlreadyExists {
			t.Errorf("RunPodSandbox of a recovered pod's name: %v, want AlreadyExists", err)
		}
		_, err = d.Runtime.CreateContainer(ctx, podA, containerConfig("counter", ref, "true"), cfgA)
		if status.Code(err) != codes.AlreadyExists {
			t.Errorf("CreateContainer of a recovered container's name: %v, want AlreadyExists", err)
		}
	})

	execBuilt := true
	t.Run("exec into recovered containers", func(t *testing.T) {
		out, ok := d.execSync(t, idle, "hostname")
		if !ok {
			execBuilt = false
			t.Skip("ExecSync not built yet")
		}
		if strings.TrimSpace(out) != "restart-a" {
			t.Errorf("hostname in pod A = %q", out)
		}
		var streamed lockedBuffer
		req := &runtime.ExecRequest{ContainerId: idle, Cmd: []string{"echo", "streamed"}, Stdout: true}
		if err := d.stream(t, "spdy", req, remotecommand.StreamOptions{Stdout: &streamed}); err != nil || streamed.String() != "streamed\n" {
			t.Errorf("streaming exec into a recovered container: %q, %v", streamed.String(), err)
		}
	})

	t.Run("attach to a recovered container", func(t *testing.T) {
		resp, err := d.Runtime.Attach(ctx, &runtime.AttachRequest{ContainerId: reader, Stdin: true, Stdout: true})
		if err != nil {
			t.Fatal(err)
		}
		stdin, typing := io.Pipe()
		defer typing.Close()
		var out lockedBuffer
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		ex := executor(t, "spdy", resp.GetUrl())
		go func() { _ = ex.StreamWithContext(actx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &out}) }()
		_, _ = io.WriteString(typing, "after-restart\n")
		waitOutput(t, &out, "got:after-restart", 10*time.Second)
	})

	t.Run("the old streaming URLs are gone", func(t *testing.T) {
		client := &http.Client{Timeout: 5 * time.Second}
		resp, err := client.Post(oldExecURL, "", nil)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode < 400 {
				t.Errorf("an exec URL of the killed daemon still answers %s", resp.Status)
			}
		}
	})

	t.Run("pod network and new containers work in recovered pods", func(t *testing.T) {
		dial := containerConfig("dial", ref, "sh", "-c", "for i in $(seq 50); do echo hello-after-restart | nc "+ips[podC]+" 8080 && exit 0; sleep 0.1; done; exit 1")
		if st, log := d.runToExit(t, podA, cfgA, dial); st.GetExitCode() != 0 {
			t.Fatalf("pod A could not reach pod C at %s:8080 after the restart: exit %d, %q", ips[podC], st.GetExitCode(), log)
		}
		// The listener's stdin stays open: busybox nc may quit at its
		// end of input before it has written what it received.
		d.waitLogged(t, listener, "hello-after-restart")
	})

	t.Run("logs have no gap", func(t *testing.T) {
		n := len(numbersIn(t, counterLog))
		waitFor(t, "the counter to log after the restart", 10*time.Second, func() bool { return len(numbersIn(t, counterLog)) > n+10 })
		if err := d.Runtime.StopContainer(ctx, counter, 0); err != nil {
			t.Fatalf("StopContainer of a recovered container: %v", err)
		}
		for i, got := range numbersIn(t, counterLog) {
			if got != i+1 {
				t.Fatalf("log line %d holds %d: a line was lost or repeated around the restart", i+1, got)
			}
		}
	})

	t.Run("stop and remove recovered objects leave nothing", func(t *testing.T) {
		if err := d.Runtime.StopContainer(ctx, idle, 1); err != nil {
			t.Errorf("StopContainer: %v", err)
		}
		if st := d.status(t, idle); st.GetState() != runtime.ContainerState_CONTAINER_EXITED {
			t.Errorf("idle after stop: %v", st.GetState())
		}
		for _, id := range []string{counter, idle, waiter, listener, reader} {
			if err := d.Runtime.RemoveContainer(ctx, id); err != nil {
				t.Errorf("RemoveContainer %s: %v", id, err)
			}
		}
		d.removeAll(t)
		d.assertNoLeaks(t, infra)
	})
	if !execBuilt {
		t.Skip("everything else passed; the exec part waits for ExecSync")
	}
}

// TestRestartTwiceIsHarmless restarts an idle and a busy daemon twice in a
// row: the repair of a repaired state changes nothing.
func TestRestartTwiceIsHarmless(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	cfg := d.hostNetworkPod("twice")
	pod := d.runPod(t, cfg)
	id := d.startContainer(t, pod, cfg, runningContainer("c", ref))
	d.waitLogged(t, id, "ready")
	exited, _ := d.runToExit(t, pod, cfg, containerConfig("done", ref, "sh", "-c", "exit 4"))
	for range 2 {
		d.restart(t)
	}
	if st := d.status(t, id); st.GetState() != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("after two restarts: %v, want RUNNING", st.GetState())
	}
	if st := d.status(t, exited.GetId()); st.GetExitCode() != 4 || st.GetFinishedAt() != exited.GetFinishedAt() {
		t.Errorf("exited container after two restarts: exit %d at %d, was %d at %d", st.GetExitCode(), st.GetFinishedAt(), exited.GetExitCode(), exited.GetFinishedAt())
	}
	d.removeAll(t)
	d.assertNoLeaks(t, leakCheck{})
}

// TestRestartSweepsWhatNoRecordNames loses the records of a pod and its
// container while the daemon is down (as a disk fault would): the next start
// finds their pod dir, pins, CNI attachment, bundle, monitor, rootfs and
// runtime state without a record, and removes them all.
func TestRestartSweepsWhatNoRecordNames(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	d.bridgeNetwork(t)
	cfg := d.podConfig("lost")
	// No infra process: without its record nothing could find it (see
	// docs/reliability.md).
	cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_CONTAINER}}
	pod := d.runPod(t, cfg)
	id := d.startContainer(t, pod, cfg, runningContainer("c", ref))
	d.waitLogged(t, id, "ready")
	monitor := d.containerRecord(t, id).Monitor.PID

	d.kill9(t)
	for _, p := range []string{filepath.Join(d.Root, "sandboxes", pod+".json"), filepath.Join(d.Root, "containers", id+".json")} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	d.Start()
	if pods, err := d.Runtime.ListPodSandbox(context.Background(), nil); err != nil || len(pods) != 0 {
		t.Errorf("after losing the records: %d sandboxes (%v), want none", len(pods), err)
	}
	d.assertNoLeaks(t, leakCheck{pids: []int{monitor}})
}

// TestRestartWaitsForTheLockOfAKilledDaemon: after a SIGKILL the state
// root's lock can outlive the daemon for as long as a process it forked
// holds a copy of the lock's descriptor (before that child's exec closes
// it). Such a holder is made here for sure: the next daemon must not fail
// ("another minicri is using the state root") but wait, say once which
// process holds the lock, and start when that process exits.
func TestRestartWaitsForTheLockOfAKilledDaemon(t *testing.T) {
	d := StartDaemon(t)
	d.kill9(t)
	holder, release := holdStateRootLock(t, d)

	out := &syncBuffer{}
	next := exec.Command(filepath.Join(binDir, "minicri"), d.args...)
	next.Stdout, next.Stderr = out, out
	next.Env = append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"))
	if err := next.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = next.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = next.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = next.Process.Kill()
			<-exited
		}
	})
	want := fmt.Sprintf("pid %d (sleep 60)", holder)
	waitFor(t, "the next daemon to say it waits for the lock's holder", 20*time.Second, func() bool {
		return strings.Contains(out.String(), "the state root is still locked") && strings.Contains(out.String(), want)
	})
	select {
	case <-exited:
		t.Fatalf("the next daemon exited while it should wait for the lock:\n%s", out.String())
	default:
	}
	if conn, err := net.Dial("unix", d.Socket); err == nil {
		conn.Close()
		t.Fatalf("the next daemon serves while another process holds the lock:\n%s", out.String())
	}
	release()
	waitFor(t, "the next daemon to serve once the holder exited", 20*time.Second, func() bool {
		conn, err := net.Dial("unix", d.Socket)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
	if n := strings.Count(out.String(), "the state root is still locked"); n != 1 {
		t.Errorf("the wait was logged %d times, want once:\n%s", n, out.String())
	}
}
