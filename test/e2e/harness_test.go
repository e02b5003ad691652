//go:build e2e

// Package e2e runs the real minicri daemon binary, with real runc, and talks
// to it with the kubelet's own CRI client (k8s.io/cri-client). Each test gets
// its own daemon with its own state root, run dir and socket, so tests and
// whole runs never collide. Run with: go test -tags e2e ./test/e2e/ (as root).
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"

	"github.com/minicri/minicri/conmon"
)

// binDir holds the minicri binaries under test: $MINICRI_BIN_DIR when set (the
// Makefile builds them once, into bin/e2e), otherwise built by TestMain into a
// temp dir. Both are built with -tags crashpoints, which the crash tests need,
// nri_no_wasm and grpcnotrace, as make build does.
var binDir string

// tmpPrefix names every temp dir of this run, so that the leak check at the
// end can find anything of ours left behind.
var tmpPrefix = fmt.Sprintf("mcri-e2e-%d-", os.Getpid())

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e: skipped, these tests run the daemon for real and need root")
		return 0
	}
	binDir = os.Getenv("MINICRI_BIN_DIR")
	if binDir == "" {
		dir, err := os.MkdirTemp("", tmpPrefix+"bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if err := buildBinaries(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		binDir = dir
	}
	ipForward, _ := os.ReadFile(ipForwardPath)
	code := m.Run()
	for i := len(suiteEnd) - 1; i >= 0; i-- {
		suiteEnd[i]()
	}
	// The bridge plugin turns forwarding on for the whole host: put it back.
	if len(ipForward) > 0 {
		_ = os.WriteFile(ipForwardPath, ipForward, 0o644)
	}
	leaks := append(findLeaks(), removeTestCgroups()...)
	if len(leaks) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: the suite left things behind:\n  %s\n", strings.Join(leaks, "\n  "))
		if code == 0 {
			code = 1
		}
	}
	return code
}

func buildBinaries(dir string) error {
	root, err := filepath.Abs("../..")
	if err != nil {
		return err
	}
	for _, pkg := range []string{"./cmd/minicri", "./cmd/minicri-conmon"} {
		if _, err := os.Stat(filepath.Join(root, pkg)); err != nil {
			continue
		}
		cmd := exec.Command("go", "build", "-tags", "crashpoints,nri_no_wasm,grpcnotrace", "-o", dir, pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %v\n%s", pkg, err, out)
		}
	}
	// The pod infra process, as the Makefile builds it.
	cc := exec.Command("cc", "-static", "-Os", "-s", "-o", filepath.Join(dir, "minicri-pause"), "cmd/minicri-pause/pause.c")
	cc.Dir = root
	if out, err := cc.CombinedOutput(); err != nil {
		return fmt.Errorf("build minicri-pause: %v\n%s", err, out)
	}
	return nil
}

// suiteEnd holds what runs once after the last test, last added first: the
// shutdown of what tests share (the guest VM of the guest tests).
var suiteEnd []func()

const ipForwardPath = "/proc/sys/net/ipv4/ip_forward"

// findLeaks lists mounts and processes that still refer to this run's temp dirs.
func findLeaks() []string {
	var leaks []string
	if mounts, err := os.ReadFile("/proc/self/mounts"); err == nil {
		for _, line := range strings.Split(string(mounts), "\n") {
			if strings.Contains(line, tmpPrefix) {
				leaks = append(leaks, "mount: "+line)
			}
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(cmdline, []byte(tmpPrefix)) {
			continue
		}
		leaks = append(leaks, fmt.Sprintf("process %s: %s", filepath.Base(filepath.Dir(p)), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
	}
	return leaks
}

// Daemon is one running minicri and the kubelet's clients connected to it.
type Daemon struct {
	Dir       string // the test's temp dir, holding everything below
	Root      string
	RunDir    string
	Socket    string
	NRISocket string // where this daemon's NRI plugins connect
	Endpoint  string
	Runtime   internalapi.RuntimeService
	Images    internalapi.ImageManagerService

	t                 testing.TB
	args              []string
	cmd               *exec.Cmd
	exited            chan struct{}
	stderr            *syncBuffer
	cleanupRegistered bool
	watchStart        func(output fmt.Stringer) // StartWatching's
}

// DaemonOption changes how StartDaemon runs the daemon.
type DaemonOption func(*Daemon)

// WithArgs adds command-line flags.
func WithArgs(args ...string) DaemonOption {
	return func(d *Daemon) { d.args = append(d.args, args...) }
}

// WithRoot puts the daemon's state root at root, in place of its temp dir's.
func WithRoot(root string) DaemonOption {
	return func(d *Daemon) {
		d.Root = root
		d.setFlag("--root", root)
	}
}

// WithRunDir puts the daemon's run dir at dir, in place of its temp dir's.
func WithRunDir(dir string) DaemonOption {
	return func(d *Daemon) {
		d.RunDir = dir
		d.setFlag("--run-dir", dir)
	}
}

// setFlag replaces the value of one of the flags NewDaemon passes.
func (d *Daemon) setFlag(flag, value string) {
	for i := range d.args[:len(d.args)-1] {
		if d.args[i] == flag {
			d.args[i+1] = value
		}
	}
}

// WithConfig writes a config file into the daemon's dir and passes --config.
func WithConfig(toml string) DaemonOption {
	return func(d *Daemon) {
		path := filepath.Join(d.Dir, "minicri.toml")
		if err := os.WriteFile(path, []byte(toml), 0o644); err != nil {
			d.t.Fatal(err)
		}
		d.args = append(d.args, "--config", path)
	}
}

// NewDaemon prepares a daemon with its own dirs but does not start it.
func NewDaemon(t testing.TB, opts ...DaemonOption) *Daemon {
	t.Helper()
	dir, err := os.MkdirTemp("", tmpPrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopRecordedInfras(filepath.Join(dir, "run"))
		os.RemoveAll(dir)
	})
	d := &Daemon{
		Dir:    dir,
		Root:   filepath.Join(dir, "root"),
		RunDir: filepath.Join(dir, "run"),
		Socket: filepath.Join(dir, "cri.sock"),
		// Its own NRI socket and plugin dirs: daemons of parallel tests
		// never share the node's /var/run/nri/nri.sock, nor launch the
		// node's plugins.
		NRISocket: filepath.Join(dir, "nri.sock"),
		t:         t,
	}
	d.Endpoint = "unix://" + d.Socket
	d.args = []string{"--root", d.Root, "--run-dir", d.RunDir, "--listen", d.Socket, "--log-level", "debug",
		"--cni-conf-dir", filepath.Join(dir, "cni"),
		"--nri-socket-path", d.NRISocket,
		"--nri-plugin-path", filepath.Join(dir, "nri-plugins"),
		"--nri-plugin-config-path", filepath.Join(dir, "nri-conf.d")}
	for _, o := range opts {
		o(d)
	}
	return d
}

// StartDaemon starts a daemon, waits until it answers, and stops it at the end of the test.
func StartDaemon(t testing.TB, opts ...DaemonOption) *Daemon {
	t.Helper()
	d := NewDaemon(t, opts...)
	d.Start()
	return d
}

// Start runs the daemon and connects the clients; the test fails if it does
// not answer within 20 s. Start may be called again after the daemon died
// (a restart on the same dirs): the stop registered by the first call stops
// whichever process is current, and runs after the cleanups of the pods made
// meanwhile, which a later registration would not.
func (d *Daemon) Start() {
	d.t.Helper()
	if d.stderr != nil {
		before := d.stderr.String()
		d.t.Cleanup(func() {
			if d.t.Failed() {
				d.t.Logf("--- daemon output before the restart ---\n%s", before)
			}
		})
	}
	d.stderr = &syncBuffer{}
	d.cmd = exec.Command(filepath.Join(binDir, "minicri"), d.args...)
	d.cmd.Stderr = d.stderr
	d.cmd.Stdout = d.stderr
	d.cmd.Env = append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"))
	if err := d.cmd.Start(); err != nil {
		d.t.Fatalf("start daemon: %v", err)
	}
	exited := make(chan struct{})
	d.exited = exited
	go func() { _ = d.cmd.Wait(); close(exited) }()
	if watch := d.watchStart; watch != nil {
		go watch(d.stderr)
	}
	if !d.cleanupRegistered {
		d.t.Cleanup(d.stopAndReport)
		d.cleanupRegistered = true
	}

	if err := d.waitForSocket(20 * time.Second); err != nil {
		d.t.Fatalf("daemon did not come up: %v\n--- daemon output ---\n%s", err, d.stderr.String())
	}
	ctx := context.Background()
	rt, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(d.Endpoint).WithConnectionTimeout(10 * time.Second).WithTracerProvider(nil).WithUseStreaming(false).Build(ctx)
	if err != nil {
		d.t.Fatalf("connect runtime service: %v\n%s", err, d.stderr.String())
	}
	img, err := remote.NewRemoteImageServiceBuilder().WithEndpoint(d.Endpoint).WithConnectionTimeout(10 * time.Second).WithTracerProvider(nil).Build(ctx)
	if err != nil {
		d.t.Fatalf("connect image service: %v\n%s", err, d.stderr.String())
	}
	d.Runtime, d.Images = rt, img
}

// StartWatching is Start with watch running beside the wait for the
// socket, on the new daemon's output.
func (d *Daemon) StartWatching(watch func(output fmt.Stringer)) {
	d.t.Helper()
	d.watchStart = watch
	defer func() { d.watchStart = nil }()
	d.Start()
}

// socketPoll is how often waitForSocket tries the socket. make bench times a
// restart through this wait (restartRow): at 20 ms, the poll alone added
// up to 20 ms to a start of 40-60.
const socketPoll = 2 * time.Millisecond

// waitForSocket waits until the socket accepts a connection: the file alone
// appears at bind, before listen, and may be a stale one of a killed daemon.
func (d *Daemon) waitForSocket(timeout time.Duration) error {
	err := waitForSocket(d.Socket, d.exited, timeout)
	if errors.Is(err, errDaemonExited) {
		return fmt.Errorf("%w: %v", err, d.cmd.ProcessState)
	}
	return err
}

var errDaemonExited = errors.New("daemon exited")

// waitForSocket waits until socket accepts a connection, or exited closes.
func waitForSocket(socket string, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errDaemonExited
		default:
		}
		if conn, err := net.Dial("unix", socket); err == nil {
			conn.Close()
			return nil
		}
		time.Sleep(socketPoll)
	}
	return fmt.Errorf("no daemon answering on %s after %s", socket, timeout)
}

// Signal sends sig to the daemon.
func (d *Daemon) Signal(sig syscall.Signal) {
	if err := d.cmd.Process.Signal(sig); err != nil {
		d.t.Fatalf("signal daemon: %v", err)
	}
}

// Wait waits for the daemon to exit and returns its exit code.
func (d *Daemon) Wait(timeout time.Duration) int {
	d.t.Helper()
	select {
	case <-d.exited:
		return d.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		d.t.Fatalf("daemon still running %s after being asked to stop\n%s", timeout, d.stderr.String())
		return -1
	}
}

// Output is what the daemon has logged so far.
func (d *Daemon) Output() string { return d.stderr.String() }

// stopAndReport stops the daemon (TERM, then KILL after 10 s) and shows its
// log when the test failed.
func (d *Daemon) stopAndReport() {
	select {
	case <-d.exited:
	default:
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(10 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.exited
		}
	}
	if d.t.Failed() {
		d.t.Logf("--- daemon output ---\n%s", d.stderr.String())
	}
}

// runMinicri runs the minicri binary to completion and returns its exit code
// and combined output; it fails the test if it runs longer than 20 s.
func runMinicri(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "minicri"), args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("minicri %v did not finish in 20 s:\n%s", args, out)
	}
	if exitErr, ok := err.(*exec.ExitError); ok {
		return exitErr.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("minicri %v: %v", args, err)
	}
	return 0, string(out)
}

// syncBuffer is a bytes.Buffer safe for the daemon's output goroutine and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// stopRecordedInfras kills the infra processes the pod dirs under runDir
// record (pid and start time, as the daemon finds them): a test that
// failed before it removed its pods (a daemon that did not come up) would
// leave them running, and the RemoveAll after it takes their records, so
// that no later daemon could find them.
func stopRecordedInfras(runDir string) {
	dirs, _ := filepath.Glob(filepath.Join(runDir, "pods", "*"))
	for _, dir := range dirs {
		in, err := conmon.RecordedInfra(dir)
		if err == nil && in.PID > 0 && conmon.Alive(in.PID, in.StartTime) {
			_ = syscall.Kill(in.PID, syscall.SIGKILL)
		}
	}
}
