//go:build e2e

package e2e

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/term"
	"k8s.io/client-go/tools/remotecommand"
)

// Exec streams at the machine's limit: each row streams benchStreamBytes
// through minicri as users do (crictl over SPDY, kubectl's client over
// WebSocket v5 through the kubelet, stdin as `kubectl cp` sends it, a
// terminal), and its floor is `runc exec` in the same container with the
// same pipes or terminal, measured right after each run of the row.
const (
	benchStreamBytes = 200_000_000
	benchTTYBytes    = 50_000_000 // a terminal is slower: fewer bytes, the same run time
	benchStreamRuns  = 5
)

// benchExecStreams needs a kubelet (MINICRI_KUBELET) for its WebSocket rows
// and crictl (beside MINICRI_CRITEST) for the others; it skips the rows it
// has no client for.
func benchExecStreams(t *testing.T) {
	var (
		n  *kubeletNode
		id string
	)
	if os.Getenv(kubeletEnv) != "" {
		n = newKubeletNode(t)
		n.k.writeManifest(t, staticPod("streams", n.container("sink", sleepForever)))
		n.k.waitPod(t, "streams", "running", 2*time.Minute, running)
		id = n.k.runningContainer(t, "streams", "sink")
	} else {
		t.Logf("%s is not set: no rows through the kubelet", kubeletEnv)
		e := newExecEnv(t)
		n, id = &kubeletNode{d: e.d}, e.sleeper(t, "sink")
	}
	crictl := ""
	if c := os.Getenv(critestEnv); c != "" {
		crictl = filepath.Join(filepath.Dir(c), "crictl")
	} else {
		t.Logf("%s is not set: no crictl rows", critestEnv)
	}
	head := []string{"head", "-c", strconv.Itoa(benchStreamBytes), "/dev/zero"}
	headTTY := []string{"head", "-c", strconv.Itoa(benchTTYBytes), "/dev/zero"}
	wc := []string{"wc", "-c"}
	runcArgs := func(extra ...string) string {
		return strings.Join(append(runcExec(t, n.d, id).Args, extra...), " ")
	}
	crictlArgs := func(extra ...string) string {
		return strings.Join(append([]string{crictl, "--runtime-endpoint", n.d.Endpoint, "--timeout", "60s", "exec"}, extra...), " ")
	}
	floorOut := func() time.Duration { return shellStream(t, runcArgs(head...)+" | wc -c", benchStreamBytes) }
	floorIn := func() time.Duration {
		return shellStream(t, strings.Join(head, " ")+" | "+runcArgs(wc...), benchStreamBytes)
	}
	floorTTY := func() time.Duration {
		args := runcExec(t, n.d, id).Args // ... exec ID
		args = append(append(slices.Clone(args[:len(args)-1]), "-t", id), headTTY...)
		return ttyStream(t, args, benchTTYBytes)
	}
	type row struct {
		measure string
		ours    func() time.Duration
		floor   func() time.Duration
		bytes   int
	}
	var rows []row
	// crictl speaks SPDY by default; with --transport websocket it speaks
	// WebSocket v5 to minicri's streaming server, which the kubelet's
	// proxy does not show (it translates to SPDY).
	for _, tr := range []struct{ name, flag string }{{"SPDY", "spdy"}, {"WebSocket v5", "websocket"}} {
		if crictl == "" {
			break
		}
		crictlExec := func(extra ...string) string {
			return crictlArgs(append([]string{"--transport", tr.flag}, extra...)...)
		}
		rows = append(rows,
			row{"exec stream out, crictl (" + tr.name + ")", func() time.Duration {
				return shellStream(t, crictlExec(append([]string{id}, head...)...)+" | wc -c", benchStreamBytes)
			}, floorOut, benchStreamBytes},
			row{"exec stream in, crictl -i (" + tr.name + ")", func() time.Duration {
				return shellStream(t, strings.Join(head, " ")+" | "+crictlExec(append([]string{"-i", id}, wc...)...), benchStreamBytes)
			}, floorIn, benchStreamBytes},
			row{"exec stream tty out, crictl -it (" + tr.name + ")", func() time.Duration {
				return ttyStream(t, strings.Fields(crictlExec(append([]string{"-it", id}, headTTY...)...)), benchTTYBytes)
			}, floorTTY, benchTTYBytes})
	}
	if n.k != nil {
		k := n.k
		rows = append(rows,
			row{"exec stream out, kubelet (WebSocket v5)", func() time.Duration {
				var out countingWriter
				begin := time.Now()
				err := k.stream(t, "websocket", k.streamURL("exec", "streams", "sink", head, false, false), remotecommand.StreamOptions{Stdout: &out, Stderr: io.Discard})
				if err != nil || out.n != benchStreamBytes {
					t.Fatalf("stream: %v, %d bytes", err, out.n)
				}
				return time.Since(begin)
			}, floorOut, benchStreamBytes},
			row{"exec stream in, kubelet (WebSocket v5, kubectl cp)", func() time.Duration {
				var out lockedBuffer
				begin := time.Now()
				err := k.stream(t, "websocket", k.streamURL("exec", "streams", "sink", wc, true, false),
					remotecommand.StreamOptions{Stdin: io.LimitReader(zeroReader{}, benchStreamBytes), Stdout: &out, Stderr: io.Discard})
				if got := strings.TrimSpace(out.String()); err != nil || got != strconv.Itoa(benchStreamBytes) {
					t.Fatalf("stream: %v, wc says %q", err, got)
				}
				return time.Since(begin)
			}, floorIn, benchStreamBytes},
			row{"exec stream tty out, kubelet (WebSocket v5)", func() time.Duration {
				var out countingWriter
				begin := time.Now()
				err := k.stream(t, "websocket", k.streamURL("exec", "streams", "sink", headTTY, false, true), remotecommand.StreamOptions{Stdout: &out, Tty: true})
				if err != nil || out.n != benchTTYBytes {
					t.Fatalf("stream: %v, %d bytes", err, out.n)
				}
				return time.Since(begin)
			}, floorTTY, benchTTYBytes})
	}
	// On a node's few cores a stream's speed is bounded by the CPU that
	// every process on its path spends per byte: the daemon and what it
	// runs, the kubelet, the client (crictl, or this process for the
	// WebSocket client) and the pipe's ends.
	cpu := func() time.Duration {
		c := treeCPU(n.d.cmd.Process.Pid) + childrenCPU() + selfCPU()
		if n.k != nil {
			c += treeCPU(n.k.cmd.Process.Pid)
		}
		return c
	}
	timed := func(run func() time.Duration, spent *time.Duration) time.Duration {
		before := cpu()
		d := run()
		*spent += cpu() - before
		return d
	}
	for _, r := range rows {
		var ours, floor []time.Duration
		var oursCPU, floorCPU time.Duration
		for i := 0; i < benchStreamRuns+1; i++ {
			var oc, fc time.Duration
			o, f := timed(r.ours, &oc), timed(r.floor, &fc)
			if i > 0 { // warm-up
				ours, floor = append(ours, o), append(floor, f)
				oursCPU, floorCPU = oursCPU+oc, floorCPU+fc
			}
		}
		mbps := func(d time.Duration) float64 { return float64(r.bytes) / 1e6 / d.Seconds() }
		perMB := func(d time.Duration) float64 { return ms(d) / (float64(r.bytes) / 1e6 * benchStreamRuns) }
		addBenchRow(benchRow{measure: r.measure + ", p50", value: mbps(p50(ours)), floor: mbps(p50(floor)), unit: "MB/s", goal: ">= 0.95 x runc exec piped"})
		addBenchRow(benchRow{measure: r.measure + ", CPU per MB", value: perMB(oursCPU), floor: perMB(floorCPU), unit: "ms", goal: streamCPUGoal})
	}
}

// streamCPUGoal: a floor that keeps about one of two cores busy leaves
// room for a path that spends twice its CPU per MB at the floor's speed.
const streamCPUGoal = "<= 2 x runc exec piped"

// selfCPU is the CPU time of this process: the WebSocket client's.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// shellStream times a shell pipeline that ends in `wc -c` and checks its count.
func shellStream(t *testing.T, pipeline string, want int) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	begin := time.Now()
	out, err := exec.CommandContext(ctx, "sh", "-c", pipeline).Output()
	took := time.Since(begin)
	if got := strings.TrimSpace(string(out)); err != nil || got != strconv.Itoa(want) {
		t.Fatalf("%s: %v, wc says %q", pipeline, err, got)
	}
	return took
}

// ttyStream times argv run on a terminal of the test's own (raw: every byte
// passes as it is) until it ends, and checks that want bytes came out.
func ttyStream(t *testing.T, argv []string, want int) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	if _, err := term.MakeRaw(int(slave.Fd())); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// The terminal is its controlling one, as a user's shell's is.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var out countingWriter
	_, _ = io.Copy(&out, master) // ends with EIO once the last holder of the slave is gone
	err = cmd.Wait()
	took := time.Since(begin)
	// A client may add a few bytes of its own to its terminal (crictl
	// writes a line when its stream ends).
	if err != nil || out.n < int64(want) || out.n > int64(want)+4096 {
		t.Fatalf("%v: %v, %d bytes, want %d", argv, err, out.n, want)
	}
	return took
}

// zeroReader reads zeros, as /dev/zero does.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
