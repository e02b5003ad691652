package server

import (
	"syscall"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

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
