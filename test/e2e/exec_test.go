//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	utilexec "k8s.io/utils/exec"
)

func TestExecEchoExitCodeAndStderr(t *testing.T) {
	e := newExecEnv(t)
	id := e.sleeper(t, "echo")
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			var stdout, stderr lockedBuffer
			err := e.d.stream(t, proto, &runtime.ExecRequest{ContainerId: id, Cmd: []string{"sh", "-c", "echo hello; echo oops >&2; exit 7"}, Stdout: true, Stderr: true},
				remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
			var exit utilexec.ExitError
			if !errors.As(err, &exit) || exit.ExitStatus() != 7 {
				t.Errorf("err = %v, want exit code 7", err)
			}
			if stdout.String() != "hello\n" || stderr.String() != "oops\n" {
				t.Errorf("stdout %q, stderr %q: want them apart", stdout.String(), stderr.String())
			}
			stdout = lockedBuffer{}
			err = e.d.stream(t, proto, &runtime.ExecRequest{ContainerId: id, Cmd: []string{"echo", "fine"}, Stdout: true},
				remotecommand.StreamOptions{Stdout: &stdout})
			if err != nil || stdout.String() != "fine\n" {
				t.Errorf("exit 0: err %v, output %q", err, stdout.String())
			}
		})
	}
	if left := e.d.execFiles(id); len(left) > 0 {
		t.Errorf("execs left %v", left)
	}
}

func TestExecStdinEOFEndsCat(t *testing.T) {
	e := newExecEnv(t)
	id := e.sleeper(t, "cat")
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			var stdout lockedBuffer
			input := "first line\nsecond line\n"
			err := e.d.stream(t, proto, &runtime.ExecRequest{ContainerId: id, Cmd: []string{"cat"}, Stdin: true, Stdout: true},
				remotecommand.StreamOptions{Stdin: strings.NewReader(input), Stdout: &stdout})
			if err != nil || stdout.String() != input {
				t.Errorf("err %v, output %q: cat must get all its input and end with it", err, stdout.String())
			}
		})
	}
}

func TestExecTTYResizeSeenInside(t *testing.T) {
	e := newExecEnv(t)
	id := e.sleeper(t, "tty")
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			sizes := make(sizeQueue, 2)
			sizes <- remotecommand.TerminalSize{Width: 80, Height: 24}
			stdin, typing := io.Pipe()
			var out lockedBuffer
			errc := make(chan error, 1)
			go func() {
				errc <- e.d.stream(t, proto, &runtime.ExecRequest{ContainerId: id, Cmd: []string{"sh", "-c", "while read line; do stty size; done"}, Stdin: true, Stdout: true, Tty: true},
					remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Tty: true, TerminalSizeQueue: sizes})
			}()
			typeUntil(t, &out, typing, "24 80")
			sizes <- remotecommand.TerminalSize{Width: 132, Height: 43}
			typeUntil(t, &out, typing, "43 132")
			close(sizes)
			typing.Close()
			if err := <-errc; err != nil {
				t.Errorf("tty exec: %v", err)
			}
		})
	}
}

func TestExecStream100MBArrivesWhole(t *testing.T) {
	e := newExecEnv(t)
	id := e.sleeper(t, "bulk")
	const size = 100_000_000
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			var out countingWriter
			start := time.Now()
			err := e.d.stream(t, proto, &runtime.ExecRequest{ContainerId: id, Cmd: []string{"head", "-c", fmt.Sprint(size), "/dev/zero"}, Stdout: true},
				remotecommand.StreamOptions{Stdout: &out})
			if err != nil || out.n != size || out.nz {
				t.Errorf("err %v, got %d bytes (non-zero bytes: %v), want %d zeros", err, out.n, out.nz, size)
			}
			t.Logf("%s: 100 MB in %s", proto, time.Since(start).Round(time.Millisecond))
		})
	}
}

func TestExecClientDisconnectLeavesNothing(t *testing.T) {
	e := newExecEnv(t)
	id := e.sleeper(t, "gone")
	ptysBefore := e.d.daemonFDsTo("ptmx")
	for i, tc := range []struct {
		proto string
		tty   bool
	}{{"spdy", false}, {"websocket", false}, {"spdy", true}, {"websocket", true}} {
		t.Run(fmt.Sprintf("%s/tty=%v", tc.proto, tc.tty), func(t *testing.T) {
			marker := fmt.Sprint(987650 + i) // a sleep nobody else runs
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out lockedBuffer
			stdin, typing := io.Pipe()
			defer typing.Close()
			u := e.d.execURL(t, &runtime.ExecRequest{ContainerId: id, Cmd: []string{"sh", "-c", "echo started; sleep " + marker + " & sleep " + marker}, Stdin: true, Stdout: true, Tty: tc.tty})
			errc := make(chan error, 1)
			go func() {
				errc <- executor(t, tc.proto, u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Tty: tc.tty})
			}()
			waitOutput(t, &out, "started", 10*time.Second)
			cancel() // the client goes away
			<-errc
			waitNoProcess(t, "sleep "+marker, 10*time.Second)
			waitNoProcess(t, "--pid-file "+e.d.RunDir, 10*time.Second) // no runc exec left
			waitFor(t, "the exec's files to go", 5*time.Second, func() bool { return len(e.d.execFiles(id)) == 0 })
		})
	}
	waitFor(t, "the daemon to close its ptys", 5*time.Second, func() bool { return e.d.daemonFDsTo("ptmx") == ptysBefore })
}

func TestExecTokenSingleUseAndExpiring(t *testing.T) {
	e := newExecEnv(t, WithArgs("--streaming-token-ttl", "1s"))
	id := e.sleeper(t, "token")
	req := &runtime.ExecRequest{ContainerId: id, Cmd: []string{"true"}, Stdout: true}
	u := e.d.execURL(t, req)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := executor(t, "spdy", u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard}); err != nil {
		t.Fatalf("first use: %v", err)
	}
	for _, proto := range protocols {
		if err := executor(t, proto, u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard}); err == nil {
			t.Errorf("a used URL streamed again over %s", proto)
		}
	}
	if code := postStatus(t, u); code != http.StatusNotFound {
		t.Errorf("a used URL answers %d, want 404", code)
	}
	u = e.d.execURL(t, req)
	time.Sleep(1500 * time.Millisecond)
	if err := executor(t, "spdy", u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard}); err == nil {
		t.Error("an expired URL streamed")
	}
}

func postStatus(t *testing.T, u string) int {
	t.Helper()
	resp, err := http.Post(u, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestExecRequestsAreValidated(t *testing.T) {
	e := newExecEnv(t)
	id := e.sleeper(t, "valid")
	stopped := e.d.createContainer(t, e.pod, e.podCfg, containerConfig("created", e.ref, "true"))
	ctx := context.Background()
	cases := []struct {
		name string
		req  *runtime.ExecRequest
		code codes.Code
		want string
	}{
		{"no command", &runtime.ExecRequest{ContainerId: id, Stdout: true}, codes.InvalidArgument, "cmd"},
		{"no stream", &runtime.ExecRequest{ContainerId: id, Cmd: []string{"true"}}, codes.InvalidArgument, "stdin"},
		{"tty and stderr", &runtime.ExecRequest{ContainerId: id, Cmd: []string{"true"}, Tty: true, Stdout: true, Stderr: true}, codes.InvalidArgument, "stderr"},
		{"unknown container", &runtime.ExecRequest{ContainerId: "feedbeef", Cmd: []string{"true"}, Stdout: true}, codes.NotFound, "feedbeef"},
		{"container not running", &runtime.ExecRequest{ContainerId: stopped, Cmd: []string{"true"}, Stdout: true}, codes.FailedPrecondition, "not running"},
	}
	for _, tc := range cases {
		_, err := e.d.Runtime.Exec(ctx, tc.req)
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %s naming %q", tc.name, err, tc.code, tc.want)
		}
	}
	if _, _, err := e.d.Runtime.ExecSync(ctx, stopped, []string{"true"}, time.Second); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("ExecSync in a created container: %v, want FailedPrecondition", err)
	}
}

func TestExecSyncOutputOverTheCapIsTruncated(t *testing.T) {
	e := newExecEnv(t, WithArgs("--runtime-exec-sync-max-output", "1000"))
	id := e.sleeper(t, "cap")
	stdout, stderr, err := e.d.Runtime.ExecSync(context.Background(), id, []string{"sh", "-c", "head -c 5000 /dev/zero; head -c 3000 /dev/zero >&2; echo small >&2"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(stdout) != 1000 || len(stderr) != 1000 {
		t.Errorf("kept %d bytes of stdout and %d of stderr, want 1000 each", len(stdout), len(stderr))
	}
	waitFor(t, "the truncation in the daemon's log", 5*time.Second, func() bool { return strings.Contains(e.d.Output(), "truncated") })
}

func TestExecSyncTimeoutKillsTheCommand(t *testing.T) {
	e := newExecEnv(t)
	id := e.sleeper(t, "timeout")
	start := time.Now()
	_, _, err := e.d.Runtime.ExecSync(context.Background(), id, []string{"sh", "-c", "sleep 100 & sleep 101"}, time.Second)
	took := time.Since(start)
	if !errors.Is(err, remote.ErrCommandTimedOut) {
		t.Errorf("err = %v, want the kubelet's timed-out error (DeadlineExceeded)", err)
	}
	if took < time.Second || took > 4*time.Second {
		t.Errorf("a 1s ExecSync answered after %s", took)
	}
	waitNoProcess(t, "sleep 10", 5*time.Second)
}

func TestExecSyncBackgroundChildDoesNotHang(t *testing.T) {
	e := newExecEnv(t)
	id := e.sleeper(t, "bg")
	start := time.Now()
	stdout, _, err := e.d.Runtime.ExecSync(context.Background(), id, []string{"sh", "-c", "sleep 300 & echo ok"}, 2*time.Second)
	took := time.Since(start)
	if err != nil || string(stdout) != "ok\n" {
		t.Errorf("err %v, stdout %q: want the probe's own answer", err, stdout)
	}
	if took > 4*time.Second {
		t.Errorf("answered after %s, want by the 2s timeout", took)
	}
	waitNoProcess(t, "sleep 300", 5*time.Second)
}

func TestExecSync50InParallel(t *testing.T) {
	e := newExecEnv(t)
	id := e.sleeper(t, "many")
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			stdout, stderr, err := e.d.Runtime.ExecSync(ctx, id, []string{"sh", "-c", fmt.Sprintf("echo out%d; echo err%d >&2; exit %d", i, i, i%4)}, 30*time.Second)
			var exit utilexec.CodeExitError
			code := 0
			if errors.As(err, &exit) {
				code, err = exit.Code, nil
			}
			if err != nil || code != i%4 || string(stdout) != fmt.Sprintf("out%d\n", i) || string(stderr) != fmt.Sprintf("err%d\n", i) {
				t.Errorf("call %d: err %v, exit %d, stdout %q, stderr %q", i, err, code, stdout, stderr)
			}
		}()
	}
	wg.Wait()
	if left := e.d.execFiles(id); len(left) > 0 {
		t.Errorf("execs left %v", left)
	}
}

func TestAttachToContainerReadingStdin(t *testing.T) {
	e := newExecEnv(t)
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			cfg := containerConfig("reader-"+proto, e.ref, "sh", "-c", "echo ready; while read line; do echo got:$line; done; echo bye")
			cfg.Stdin, cfg.StdinOnce = true, true
			id := e.d.startContainer(t, e.pod, e.podCfg, cfg)
			resp, err := e.d.Runtime.Attach(context.Background(), &runtime.AttachRequest{ContainerId: id, Stdin: true, Stdout: true, Stderr: true})
			if err != nil {
				t.Fatal(err)
			}
			stdin, typing := io.Pipe()
			var out lockedBuffer
			errc := make(chan error, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			go func() {
				errc <- executor(t, proto, resp.GetUrl()).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Stderr: io.Discard})
			}()
			io.WriteString(typing, "hello\n")
			waitOutput(t, &out, "got:hello", 10*time.Second)
			typing.Close() // stdin once: the container's stdin ends with ours
			if err := <-errc; err != nil {
				t.Errorf("attach: %v", err)
			}
			waitOutput(t, &out, "bye", 5*time.Second)
			st := e.d.waitExited(t, id, 10*time.Second)
			if log := readLog(t, st.GetLogPath()); !strings.Contains(log, "got:hello") {
				t.Errorf("container log %q lacks what attach sent", log)
			}
		})
	}
}

func TestPortForwardTwoConnectionsToNc(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	d.bridgeNetwork(t)
	podCfg := d.podConfig("pf")
	pod := d.runPod(t, podCfg)
	// nc -ll -e cat: an echo server that serves connections at once.
	id := d.startContainer(t, pod, podCfg, containerConfig("echo", ref, "nc", "-ll", "-p", "8080", "-e", "cat"))
	// Forward only once nc listens: the port-forward client ends the whole
	// forwarding when the pod refuses a connection, and no retry gets it back.
	waitFor(t, "nc to listen on port 8080 (1F90) in the pod", 10*time.Second, func() bool {
		out, _ := d.execSync(t, id, "cat", "/proc/net/tcp", "/proc/net/tcp6")
		return regexp.MustCompile(`:1F90 0+:0000 0A `).MatchString(out)
	})
	resp, err := d.Runtime.PortForward(context.Background(), &runtime.PortForwardRequest{PodSandboxId: pod, Port: []int32{8080}})
	if err != nil {
		t.Fatal(err)
	}
	local := forwardPorts(t, &rest.Config{}, resp.GetUrl(), 8080)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := strings.Repeat(fmt.Sprintf("connection %d\n", i), 1000)
			if got := echoThrough(t, local, msg); string(got) != msg {
				t.Errorf("connection %d: got %d bytes back, want the %d sent", i, len(got), len(msg))
			}
		}()
	}
	wg.Wait()

	_, err = d.Runtime.PortForward(context.Background(), &runtime.PortForwardRequest{PodSandboxId: "feedbeef", Port: []int32{80}})
	if status.Code(err) != codes.NotFound {
		t.Errorf("PortForward to an unknown pod: %v, want NotFound", err)
	}
}

// echoThrough sends msg on a new connection to the local port, half-closes,
// and returns what came back.
func echoThrough(t *testing.T, port int, msg string) []byte {
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Errorf("dial forwarded port: %v", err)
		return nil
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	go func() {
		io.WriteString(conn, msg)
		conn.(*net.TCPConn).CloseWrite()
	}()
	got, _ := io.ReadAll(conn)
	return got
}

// stalledWriter is a client that stops reading: its first write never returns.
type stalledWriter struct{ release chan struct{} }

func (w stalledWriter) Write(p []byte) (int, error) {
	<-w.release
	return 0, io.ErrClosedPipe
}

func TestExecStalledClientDoesNotBlockStopOrRemove(t *testing.T) {
	e := newExecEnv(t)
	id := e.sleeper(t, "stalled")
	const marker = "stalled-client-marker"
	u := e.d.execURL(t, &runtime.ExecRequest{ContainerId: id, Cmd: []string{"sh", "-c", "exec yes " + marker}, Stdin: true, Stdout: true, Tty: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := stalledWriter{release: make(chan struct{})}
	defer close(out.release)
	stdin, typing := io.Pipe()
	defer typing.Close()
	go executor(t, "spdy", u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: out, Tty: true})
	waitFor(t, "the exec to run", 10*time.Second, func() bool { return len(hostProcesses("yes "+marker)) > 0 })
	time.Sleep(200 * time.Millisecond) // long enough for every buffer on the way to fill

	start := time.Now()
	if err := e.d.Runtime.StopContainer(context.Background(), id, 0); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	if err := e.d.Runtime.RemoveContainer(context.Background(), id); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("stop and remove took %s with a stalled exec client", took)
	}
	waitNoProcess(t, "yes "+marker, 10*time.Second)
	waitNoProcess(t, "--pid-file "+e.d.RunDir, 10*time.Second)
}
