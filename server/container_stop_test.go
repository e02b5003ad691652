package server

import (
	"sync"
	"syscall"
	"testing"

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
