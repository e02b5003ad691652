package server

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	logtest "github.com/sirupsen/logrus/hooks/test"
	"google.golang.org/grpc/codes"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/image"
)

func TestParseSignal(t *testing.T) {
	cases := []struct {
		in   string
		want syscall.Signal
	}{
		{"SIGTERM", syscall.SIGTERM},
		{"TERM", syscall.SIGTERM},
		{"sigquit", syscall.SIGQUIT},
		{"9", syscall.SIGKILL},
		{"SIGIOT", syscall.SIGABRT},
		{"SIGCLD", syscall.SIGCHLD},
		{"SIGPOLL", syscall.SIGIO},
		{"SIGRTMIN", 34},
		{"SIGRTMIN+3", 37}, // systemd's halt signal, in images that run systemd
		{"RTMIN+3", 37},
		{"SIGRTMINPLUS15", 49},
		{"SIGRTMAX-1", 63},
		{"SIGRTMAXMINUS14", 50},
		{"SIGRTMAX", 64},
	}
	for _, c := range cases {
		got, err := parseSignal(c.in)
		if err != nil || got != c.want {
			t.Errorf("parseSignal(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "SIGNOPE", "SIGRTMIN+40", "SIGRTMAX-99", "SIGRTMIN+-1", "0", "65"} {
		if sig, err := parseSignal(bad); err == nil {
			t.Errorf("parseSignal(%q) = %d, want an error", bad, sig)
		}
	}
}

// Every stop signal a CRI client can ask for must reach the container as
// itself, not fall back to SIGTERM.
func TestEveryCRIStopSignalParses(t *testing.T) {
	for n, name := range runtime.Signal_name {
		if n == int32(runtime.Signal_SIGNAL_RUNTIME_DEFAULT) {
			continue
		}
		cfg := &runtime.ContainerConfig{StopSignal: runtime.Signal(n)}
		if _, err := parseSignal(stopSignal(cfg, emptyImage())); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func emptyImage() image.Image { return image.Image{} }

// TestStopPodSandboxEndsItsPIDNamespaceByItsInit: the containers in a pod's
// shared PID namespace end with its infra process, which StopPodSandbox
// stops first; only a container outside it is killed through the runtime.
func TestStopPodSandboxEndsItsPIDNamespaceByItsInit(t *testing.T) {
	ts := newTestServer(t)
	pod := podConfig("shared")
	pod.Linux.SecurityContext.NamespaceOptions.Pid = runtime.NamespaceMode_POD
	podID := ts.runPod(t, pod)
	start := func(cfg *runtime.ContainerConfig) string {
		id := ts.createCtr(t, podID, pod, cfg)
		if _, err := ts.StartContainer(bg, &runtime.StartContainerRequest{ContainerId: id}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	withPID := func(name string, mode runtime.NamespaceMode) *runtime.ContainerConfig {
		cfg := ctrConfig(name)
		cfg.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
			NamespaceOptions: &runtime.NamespaceOption{Pid: mode}}}
		return cfg
	}
	shared := start(withPID("in-pod", runtime.NamespaceMode_POD))
	own := start(withPID("own", runtime.NamespaceMode_CONTAINER))
	var mu sync.Mutex
	var killed []string
	ts.runc.OnKill = func(id string, sig syscall.Signal) {
		mu.Lock()
		killed = append(killed, id)
		mu.Unlock()
		_ = ts.monitor.Exit(id, 128+int(sig))
	}
	ts.monitor.OnStopPause = func(conmon.Infra) { _ = ts.monitor.Exit(shared, 128+int(syscall.SIGKILL)) }

	if _, err := ts.StopPodSandbox(bg, &runtime.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(killed) != 1 || killed[0] != own {
		t.Errorf("runtime kills %v, want only the container with its own PID namespace, %s", killed, own)
	}
	for _, id := range []string{shared, own} {
		if st := ts.ctrState(t, id); st != runtime.ContainerState_CONTAINER_EXITED {
			t.Errorf("container %s is %v after the pod's stop, want exited", id, st)
		}
	}
}

// A node under load can take longer than Hooks.SlowReap to reap a killed
// container. The stop waits for it as long as its caller does, succeeds,
// and says once how long it took; only the caller's deadline fails it, as
// DeadlineExceeded so that the kubelet retries, not Internal.
func TestStopWaitsForASlowReapAsLongAsTheCaller(t *testing.T) {
	const slowReap = 5 * time.Millisecond
	const reapDelay = 100 * time.Millisecond // 20 slowReaps: the old fixed wait failed here

	ts := newTestServer(t)
	ts.hooks.SlowReap = slowReap
	logs := logtest.NewLocal(ts.log.Logger)
	_, slow := ts.runningCtr(t, "slow")
	ts.runc.OnKill = func(id string, sig syscall.Signal) {
		time.AfterFunc(reapDelay, func() { _ = ts.monitor.Exit(id, 128+int(sig)) })
	}
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	start := time.Now()
	if _, err := ts.StopContainer(ctx, &runtime.StopContainerRequest{ContainerId: slow}); err != nil {
		t.Fatalf("StopContainer of a container reaped %s after SIGKILL: %v", reapDelay, err)
	}
	if took := time.Since(start); took < reapDelay {
		t.Errorf("StopContainer returned after %s, before the exit (%s)", took, reapDelay)
	}
	if st := ts.ctrState(t, slow); st != runtime.ContainerState_CONTAINER_EXITED {
		t.Errorf("container is %v after the stop, want exited", st)
	}
	var slowLines int
	for _, e := range logs.AllEntries() {
		if e.Data["container"] == slow && e.Data["waited"] != nil {
			slowLines++
			if d, err := time.ParseDuration(e.Data["waited"].(string)); err != nil || d < reapDelay {
				t.Errorf("logged wait %v, want at least %s", e.Data["waited"], reapDelay)
			}
		}
	}
	if slowLines != 1 {
		t.Errorf("%d log lines about the slow reap, want 1", slowLines)
	}

	// A container never reaped within the caller's deadline.
	_, stuck := ts.runningCtr(t, "stuck")
	never := make(chan struct{})
	ts.runc.OnKill = func(id string, sig syscall.Signal) {
		go func() { <-never; _ = ts.monitor.Exit(id, 128+int(sig)) }()
	}
	short, cancelShort := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancelShort()
	_, err := ts.StopContainer(short, &runtime.StopContainerRequest{ContainerId: stuck})
	wantCode(t, "StopContainer past the caller's deadline", err, codes.DeadlineExceeded, stuck)
	// Reaped at last, and recorded before the test's state root goes.
	close(never)
	ts.waitExited(t, stuck)
}

// A container whose processes all ended before its kill (with its pod's
// PID namespace, on a node too slow to record the exits in the pod stop's
// grace) has no cgroup left for the runtime's kill --all, which fails: the
// stop still succeeds once the exit is recorded. While a process is left
// in the cgroup, the kill's failure is the stop's.
func TestStopOfAContainerWhoseProcessesAreGone(t *testing.T) {
	cases := []struct {
		name    string
		emptied bool
		want    codes.Code
	}{
		{"cgroup emptied", true, codes.OK},
		{"a process left", false, codes.Internal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := newTestServer(t)
			_, id := ts.runningCtr(t, "gone")
			ts.runc.Fail("Kill", errors.New("runc kill: unable to kill all processes: open /sys/fs/cgroup/x.scope: no such file or directory"))
			ts.runc.Emptied = c.emptied
			// The monitor records the exit a little after the kill failed.
			recorded := time.AfterFunc(20*time.Millisecond, func() { _ = ts.monitor.Exit(id, 128+int(syscall.SIGKILL)) })
			defer recorded.Stop()
			ctx, cancel := context.WithTimeout(bg, time.Minute)
			defer cancel()
			_, err := ts.StopContainer(ctx, &runtime.StopContainerRequest{ContainerId: id})
			if c.want == codes.OK {
				if err != nil {
					t.Fatalf("StopContainer: %v", err)
				}
				if st := ts.ctrState(t, id); st != runtime.ContainerState_CONTAINER_EXITED {
					t.Errorf("container is %v after the stop, want exited", st)
				}
				return
			}
			wantCode(t, "StopContainer with a process left", err, c.want, "kill")
			ts.waitExited(t, id)
		})
	}
}
