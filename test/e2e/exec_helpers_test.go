//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// execEnv is a daemon with the busybox image and a host-network pod.
type execEnv struct {
	d      *Daemon
	ref    string
	pod    string
	podCfg *runtime.PodSandboxConfig
}

func newExecEnv(t *testing.T, opts ...DaemonOption) *execEnv {
	t.Helper()
	d := StartDaemon(t, opts...)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.podConfig("exec")
	podCfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE},
	}
	return &execEnv{d: d, ref: ref, pod: d.runPod(t, podCfg), podCfg: podCfg}
}

// sleeper starts a container that runs until it is stopped.
func (e *execEnv) sleeper(t *testing.T, name string) string {
	t.Helper()
	return e.d.startContainer(t, e.pod, e.podCfg, containerConfig(name, e.ref, "sleep", "3600"))
}

// executor returns kubectl's executor of proto for a streaming URL of the
// daemon's, which needs no credentials.
func executor(t *testing.T, proto, u string) remotecommand.Executor {
	t.Helper()
	return executorWith(t, &rest.Config{}, proto, u)
}

// execURL asks the daemon for the URL of an exec, as the kubelet does.
func (d *Daemon) execURL(t *testing.T, req *runtime.ExecRequest) string {
	t.Helper()
	resp, err := d.Runtime.Exec(context.Background(), req)
	if err != nil {
		t.Fatalf("Exec %v: %v", req.GetCmd(), err)
	}
	return resp.GetUrl()
}

// stream runs an exec over proto with the given streams, bounded by 30 s.
func (d *Daemon) stream(t *testing.T, proto string, req *runtime.ExecRequest, opts remotecommand.StreamOptions) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := executor(t, proto, d.execURL(t, req)).StreamWithContext(ctx, opts)
	if ctx.Err() != nil {
		t.Fatalf("exec %v over %s did not end within 30s", req.GetCmd(), proto)
	}
	return err
}

// countingWriter counts what it is given.
type countingWriter struct {
	mu sync.Mutex
	n  int64
	nz bool // saw a byte that is not zero
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += int64(len(p))
	for rest := p; len(rest) > 0 && !c.nz; {
		n := min(len(rest), len(zeros))
		c.nz = !bytes.Equal(rest[:n], zeros[:n])
		rest = rest[n:]
	}
	return len(p), nil
}

var zeros = make([]byte, 64<<10)

// sizeQueue feeds terminal sizes to the client as the test pushes them.
type sizeQueue chan remotecommand.TerminalSize

func (q sizeQueue) Next() *remotecommand.TerminalSize {
	s, ok := <-q
	if !ok {
		return nil
	}
	return &s
}

// hostProcesses lists host processes whose command line contains marker.
func hostProcesses(marker string) []string {
	var found []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(cmdline, []byte(marker)) {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue // a zombie is gone for our purpose
		}
		found = append(found, filepath.Base(filepath.Dir(p))+": "+string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
	}
	return found
}

// waitNoProcess waits until no host process has marker in its command line.
func waitNoProcess(t *testing.T, marker string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		left := hostProcesses(marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the exec ended, still running:\n  %s", timeout, strings.Join(left, "\n  "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// execFiles lists what an exec may leave in a container's bundle.
func (d *Daemon) execFiles(id string) []string {
	matches, _ := filepath.Glob(filepath.Join(d.RunDir, "containers", id, "*exec-*"))
	return matches
}

// daemonFDsTo counts the daemon's open descriptors whose target contains s.
func (d *Daemon) daemonFDsTo(s string) int {
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", d.cmd.Process.Pid))
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && strings.Contains(target, s) {
			n++
		}
	}
	return n
}

// waitOutput waits until out contains want.
func waitOutput(t *testing.T, out *lockedBuffer, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the output after %s; output so far: %q", want, timeout, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const (
	benchExecRuns  = 40
	benchExecBytes = 200_000_000
)

// benchExec adds ExecSync `true` p50 through the CRI, and exec stream
// throughput through the streaming server, each beside the same work done
// by runc exec alone.
func benchExec(t *testing.T) {
	e := newExecEnv(t, WithArgs("--log-level", "info"))
	id := e.sleeper(t, "bench")
	ctx := context.Background()

	var ours, floor []time.Duration
	for i := 0; i < benchExecRuns+5; i++ {
		begin := time.Now()
		if _, _, err := e.d.Runtime.ExecSync(ctx, id, []string{"true"}, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		took := time.Since(begin)
		begin = time.Now()
		if out, err := runcExec(t, e.d, id, "true").CombinedOutput(); err != nil {
			t.Fatalf("runc exec: %v: %s", err, out)
		}
		if i >= 5 { // warm-up
			ours, floor = append(ours, took), append(floor, time.Since(begin))
		}
	}
	addBenchRow(benchRow{measure: "ExecSync `true`, p50", value: ms(p50(ours)), floor: ms(p50(floor)), unit: "ms", goal: "<= 1.15 x runc exec"})

	headCmd := fmt.Sprintf("head -c %d /dev/zero", benchExecBytes)
	best := func(run func() time.Duration) time.Duration {
		b := run()
		for i := 0; i < 2; i++ {
			b = min(b, run())
		}
		return b
	}
	streamed := best(func() time.Duration {
		var out countingWriter
		begin := time.Now()
		err := e.d.stream(t, "spdy", &runtime.ExecRequest{ContainerId: id, Cmd: strings.Fields(headCmd), Stdout: true}, remotecommand.StreamOptions{Stdout: &out})
		if err != nil || out.n != benchExecBytes {
			t.Fatalf("stream: %v, %d bytes", err, out.n)
		}
		return time.Since(begin)
	})
	piped := best(func() time.Duration {
		begin := time.Now()
		cmd := exec.Command("sh", "-c", strings.Join(runcExec(t, e.d, id).Args, " ")+" "+headCmd+" | cat >/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("runc exec piped: %v: %s", err, out)
		}
		return time.Since(begin)
	})
	mbps := func(d time.Duration) float64 { return benchExecBytes / 1e6 / d.Seconds() }
	addBenchRow(benchRow{measure: "exec stream throughput (SPDY, remotecommand)", value: mbps(streamed), floor: mbps(piped), unit: "MB/s", goal: ">= 0.9 x runc piped"})
}

// typeUntil types newlines into a terminal until its output holds want:
// each line makes the shell inside print something (its terminal's size).
func typeUntil(t *testing.T, out fmt.Stringer, typing io.Writer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the terminal inside never reported %q; output %q", want, out.String())
		}
		io.WriteString(typing, "\n")
		time.Sleep(50 * time.Millisecond)
	}
}
