package oci

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestRuntimeMessage(t *testing.T) {
	tests := []struct {
		name   string
		stderr string
		want   string
	}{
		{name: "runc text log then plain", stderr: "time=\"2026-01-01T00:00:00Z\" level=error msg=\"container does not exist\"\ncontainer does not exist\n", want: "container does not exist"},
		{name: "runc json log only", stderr: `{"level":"error","msg":"unable to start: exec: \"nope\"","time":"x"}` + "\n", want: `unable to start: exec: "nope"`},
		{name: "warnings are not the error", stderr: "time=\"x\" level=warning msg=\"deprecated\"\ntime=\"x\" level=error msg=\"real problem\"\n", want: "real problem"},
		{name: "crun plain", stderr: "error opening file `/run/crun/abc/status`: No such file or directory\n", want: "error opening file `/run/crun/abc/status`: No such file or directory"},
		{name: "nothing", stderr: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := runtimeMessage([]byte(tt.stderr)); got != tt.want {
				t.Errorf("message = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestIsNotFoundMessage(t *testing.T) {
	tests := []struct {
		msg  string
		want bool
	}{
		{"container does not exist", true},
		{"error opening file `/run/crun/abc/status`: No such file or directory", true},
		{"cannot open directory '/run/crun/abc': No such file or directory", true},
		{"open /etc/abcd/x: No such file or directory", false},
		{"exec: \"/bin/nope\": stat /bin/nope: no such file or directory", false},
	}
	for _, tt := range tests {
		if got := isNotFoundMessage(tt.msg, "abc"); got != tt.want {
			t.Errorf("isNotFoundMessage(%q) = %v, want %v", tt.msg, got, tt.want)
		}
	}
}

func TestLastLogErrorTakesTheLastError(t *testing.T) {
	log := []byte(`{"level":"error","msg":"first","time":"x"}
{"level":"info","msg":"noise","time":"x"}
{"level":"error","msg":"runc create failed: unable to start container process: exec: \"/nope\": no such file","time":"x"}
`)
	if got := lastLogError(log); !strings.Contains(got, `exec: "/nope"`) {
		t.Errorf("message = %q, want the last error", got)
	}
	if got := lastLogError(nil); got != "" {
		t.Errorf("empty log gave %q", got)
	}
}

func TestHandlers(t *testing.T) {
	runc, crun := &Runtime{Path: "runc"}, &Runtime{Path: "crun"}
	h := &Handlers{Runtimes: map[string]*Runtime{"runc": runc, "crun": crun}}
	if got, err := h.Get(""); err != nil || got != runc {
		t.Errorf("default handler = %v, %v; want runc", got, err)
	}
	if got, err := h.Get("crun"); err != nil || got != crun {
		t.Errorf("crun handler = %v, %v", got, err)
	}
	_, err := h.Get("kata")
	if !errors.Is(err, ErrUnknownHandler) || !strings.Contains(err.Error(), "kata") {
		t.Errorf("unknown handler err = %v", err)
	}
	h.Default = "crun"
	if got, _ := h.Get(""); got != crun {
		t.Errorf("configured default not used")
	}
	if !slices.Equal(h.Names(), []string{"crun", "runc"}) {
		t.Errorf("names = %v", h.Names())
	}
}

func TestRuntimeGlobalArgs(t *testing.T) {
	r := &Runtime{Path: "/usr/sbin/runc", Root: "/run/x", SystemdCgroup: true}
	args := r.globalArgs("/b/runtime.log")
	want := []string{"--root", "/run/x", "--systemd-cgroup", "--log", "/b/runtime.log", "--log-format", "json"}
	if !slices.Equal(args, want) {
		t.Errorf("global args = %q\nwant %q", args, want)
	}
}

func TestRuntimeBinaryResolution(t *testing.T) {
	missing := &Runtime{Path: "no-such-runtime-binary"}
	if _, err := missing.State(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "no-such-runtime-binary") {
		t.Errorf("missing binary err = %v, want it named", err)
	}
	if _, err := os.Stat("/usr/sbin/runc"); err != nil {
		t.Skip("no /usr/sbin/runc")
	}
	t.Setenv("PATH", "/usr/sbin:/usr/bin")
	r := &Runtime{Path: "runc"}
	if bin, err := r.Binary(); err != nil || bin != "/usr/sbin/runc" {
		t.Errorf("runc resolved to %q, %v", bin, err)
	}
}

// A runtime that hangs must not hang the caller past its deadline.
func TestRuntimeCallHonoursDeadline(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "slow-runtime")
	writeFile(t, fake, "#!/bin/sh\nexec sleep 30\n")
	if err := os.Chmod(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &Runtime{Path: fake}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := r.Start(ctx, "abc")
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("Start returned after %v, deadline was 200ms", elapsed)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want DeadlineExceeded", err)
	}
	var rerr *RuntimeError
	if !errors.As(err, &rerr) || rerr.Op != "start" || rerr.ID != "abc" {
		t.Errorf("err = %#v, want a RuntimeError for start abc", err)
	}
}

// TestDeleteRemovesAnAbortedCreate: runc 1.1 killed during its create
// leaves its state directory without state.json, and in it a read-only bind
// mount of its own binary. runc's delete says the container does not exist
// and cannot remove the directory through the mount; Delete must leave
// neither.
func TestDeleteRemovesAnAbortedCreate(t *testing.T) {
	rt := testRuntime(t, "runc")
	id := "aborted-" + randomSuffix(t)
	dir := filepath.Join(rt.Root, id)
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "runc.abc123")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(self, target, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(target, unix.MNT_DETACH) })
	if err := rt.Delete(context.Background(), id, true, ""); err != nil {
		t.Fatalf("Delete of an aborted create: %v", err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state directory after Delete: %v, want it gone", err)
	}
	if data, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(data), target) {
		t.Errorf("the runtime's bind mount %s is still mounted", target)
	}
}
