package conmon_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/internal/procstat"
)

// Shared by all tests, made once in TestMain when running as root.
var (
	monitorBinary string     // the freshly built minicri-conmon
	pauseBinary   string     // the freshly built minicri-pause, beside it
	rootfs        string     // busybox and the monitor, shared read-only by every container
	specTemplate  specs.Spec // from "runc spec"
	setupErr      error      // why the real-runc tests cannot run
)

const helperEnv = "CONMON_TEST_HELPER_OPTIONS"

// idleEnv makes the test binary a process that sleeps (stopcreate_test.go).
const idleEnv = "CONMON_TEST_IDLE"

func TestMain(m *testing.M) {
	if opts := os.Getenv(helperEnv); opts != "" {
		os.Exit(runCreateHelper(opts))
	}
	if os.Getenv(idleEnv) != "" {
		time.Sleep(time.Hour) // a process that only waits to be killed
		os.Exit(0)
	}
	tmp, err := os.MkdirTemp("", "conmon-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Searchable by all: the infra process of a user-namespaced pod execs
	// its binary from here as a uid of that namespace.
	if err := os.Chmod(tmp, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if os.Geteuid() == 0 {
		setupErr = setup(tmp)
	}
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

// runCreateHelper plays a daemon that creates a container and exits at once.
func runCreateHelper(optsJSON string) int {
	var o conmon.Options
	if err := json.Unmarshal([]byte(optsJSON), &o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := conmon.Create(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	json.NewEncoder(os.Stdout).Encode(c)
	return 0
}

func setup(tmp string) error {
	if _, err := exec.LookPath("runc"); err != nil {
		return err
	}
	// The test process is the daemon. As subreaper it adopts what a dead
	// "daemon" helper or a killed monitor leaves, so tests can reap it.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return err
	}
	monitorBinary = filepath.Join(tmp, "minicri-conmon")
	build := exec.Command("go", "build", "-ldflags=-s -w", "-o", monitorBinary, "github.com/minicri/minicri/cmd/minicri-conmon")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build minicri-conmon: %v\n%s", err, out)
	}
	// As make build does (Makefile).
	pauseBinary = filepath.Join(tmp, conmon.PauseBinaryName)
	if out, err := exec.Command("cc", "-static", "-Os", "-s", "-o", pauseBinary, "../cmd/minicri-pause/pause.c").CombinedOutput(); err != nil {
		return fmt.Errorf("build minicri-pause (needs gcc and libc6-dev, hack/install-deps.sh): %v\n%s", err, out)
	}
	rootfs = filepath.Join(tmp, "rootfs")
	if err := makeRootfs(rootfs); err != nil {
		return err
	}
	specDir := filepath.Join(tmp, "spec")
	os.Mkdir(specDir, 0o700)
	if out, err := exec.Command("runc", "spec", "--bundle", specDir).CombinedOutput(); err != nil {
		return fmt.Errorf("runc spec: %v: %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(specDir, "config.json"))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, &specTemplate)
}

func makeRootfs(dir string) error {
	for _, d := range []string{"bin", "proc", "dev", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	for src, dst := range map[string]string{"/bin/busybox": "bin/busybox", monitorBinary: "minicri-conmon", pauseBinary: "minicri-pause"} {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o755); err != nil {
			return err
		}
	}
	for _, applet := range []string{"sh", "echo", "cat", "sleep", "usleep", "printf", "head", "tr", "stty", "tail", "seq", "true", "ps", "kill", "yes"} {
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", applet)); err != nil {
			return err
		}
	}
	return nil
}

func requireRuntime(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs real containers with runc")
	}
	if setupErr != nil {
		t.Skipf("cannot run containers here: %v", setupErr)
	}
}

// container is one test container: its bundle, its monitor's options, and
// what Create reported.
type container struct {
	t       *testing.T
	id      string
	cgroup  string // the cgroup parent made for this container alone
	opts    conmon.Options
	created conmon.Created
	joined  bool // created by a shared monitor's join
}

// shared reports whether the container's monitor may serve others.
func (c *container) shared() bool { return c.joined || c.opts.JoinDir != "" }

// newContainer prepares a bundle running args; edit may change the spec
// and the options before anything is created.
func newContainer(t *testing.T, args []string, edit func(*specs.Spec, *conmon.Options)) *container {
	t.Helper()
	requireRuntime(t)
	dir := t.TempDir()
	c := &container{t: t, id: "c-" + randomHex(6), cgroup: "minicri-test-" + randomHex(4)}
	spec := cloneSpec(t)
	spec.Root = &specs.Root{Path: rootfs, Readonly: true}
	spec.Process.Args = args
	spec.Process.Terminal = false
	spec.Hostname = c.id
	spec.Linux.CgroupsPath = "/" + c.cgroup + "/" + c.id
	c.opts = conmon.Options{
		ID:          c.id,
		Bundle:      filepath.Join(dir, "bundle"),
		RuntimeRoot: filepath.Join(dir, "runc"),
		LogPath:     filepath.Join(dir, "logs", "0.log"),
		ExitFile:    filepath.Join(dir, "exit"),
		SocketDir:   filepath.Join(dir, "s"),
		Binary:      monitorBinary,
	}
	if edit != nil {
		edit(spec, &c.opts)
	}
	for _, d := range []string{c.opts.Bundle, filepath.Dir(c.opts.LogPath)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	writeSpec(t, c, spec)
	t.Cleanup(c.cleanup)
	return c
}

// writeSpec writes the container's config.json into its bundle, if the
// bundle exists: a test may point it elsewhere.
func writeSpec(t *testing.T, c *container, spec *specs.Spec) {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	err = os.WriteFile(filepath.Join(c.opts.Bundle, "config.json"), b, 0o600)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}

func readSpec(t *testing.T, c *container) *specs.Spec {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.opts.Bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

func cloneSpec(t *testing.T) *specs.Spec {
	b, err := json.Marshal(specTemplate)
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// create runs conmon.Create as the daemon would.
func (c *container) create() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	created, err := conmon.Create(ctx, c.opts)
	if err != nil {
		c.t.Fatalf("Create: %v", err)
	}
	c.created = created
}

// join has the shared monitor in joinDir create the container, and starts it.
func (c *container) join(joinDir string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	created, err := conmon.Join(ctx, joinDir, c.opts)
	if err != nil {
		c.t.Fatalf("Join: %v", err)
	}
	c.created, c.joined = created, true
	c.runc("start", c.id)
}

// waitDone waits until the monitor is done with the container and returns
// the exit file's status; the monitor may go on serving others.
func (c *container) waitDone(timeout time.Duration) conmon.Exit {
	c.t.Helper()
	done, err := watchContainer(c.opts.SocketDir)
	if err != nil {
		c.t.Fatalf("WatchContainer: %v", err)
	}
	select {
	case <-done:
	case <-time.After(timeout):
		c.t.Fatalf("monitor %d still serving %s after %v", c.created.MonitorPID, c.id, timeout)
	}
	e, ok, err := conmon.ReadExit(c.opts.ExitFile)
	if err != nil || !ok {
		c.t.Fatalf("ReadExit once the monitor was done: ok=%v err=%v", ok, err)
	}
	return e
}

// watchContainer is conmon.WatchContainer as a channel closed when done.
func watchContainer(socketDir string) (<-chan struct{}, error) {
	done := make(chan struct{})
	if err := conmon.WatchContainer(socketDir, func() { close(done) }); err != nil {
		return nil, err
	}
	return done, nil
}

// run creates and starts the container.
func (c *container) run() {
	c.t.Helper()
	c.create()
	c.runc("start", c.id)
}

func (c *container) runc(args ...string) {
	c.t.Helper()
	all := append([]string{"--root", c.opts.RuntimeRoot}, args...)
	if out, err := exec.Command("runc", all...).CombinedOutput(); err != nil {
		c.t.Fatalf("runc %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// waitExit waits for the monitor to end and returns the exit file's status.
func (c *container) waitExit(timeout time.Duration) conmon.Exit {
	c.t.Helper()
	gone, err := conmon.WatchMonitor(c.created.MonitorPID, c.created.MonitorStartTime)
	if err != nil {
		c.t.Fatalf("WatchMonitor: %v", err)
	}
	select {
	case <-gone:
	case <-time.After(timeout):
		c.t.Fatalf("monitor %d still running after %v", c.created.MonitorPID, timeout)
	}
	e, ok, err := conmon.ReadExit(c.opts.ExitFile)
	if err != nil || !ok {
		c.t.Fatalf("ReadExit after the monitor ended: ok=%v err=%v", ok, err)
	}
	return e
}

// cleanup removes the container whatever state it is in, waits for its
// monitor, reaps what the test process adopted and removes the cgroups.
func (c *container) cleanup() {
	exec.Command("runc", "--root", c.opts.RuntimeRoot, "delete", "--force", c.id).Run()
	if c.shared() {
		// The monitor may serve others still: wait until it is done with
		// this container only.
		if done, err := watchContainer(c.opts.SocketDir); err == nil {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				c.t.Errorf("shared monitor %d still serves %s after it was deleted", c.created.MonitorPID, c.id)
			}
		}
		reapAdopted(c.created.MonitorPID, c.created.ContainerPID)
	} else if c.created.MonitorPID != 0 {
		gone, err := conmon.WatchMonitor(c.created.MonitorPID, c.created.MonitorStartTime)
		if err == nil {
			select {
			case <-gone:
			case <-time.After(10 * time.Second):
				c.t.Errorf("monitor %d did not exit after its container was deleted; killing it", c.created.MonitorPID)
				unix.Kill(c.created.MonitorPID, unix.SIGKILL)
				<-gone
			}
		}
		reapAdopted(c.created.MonitorPID, c.created.ContainerPID)
	}
	removeCgroup(c.t, c.cgroup)
}

// reapAdopted reaps pids that became the test process's children when their
// parent died; for any other pid it does nothing.
func reapAdopted(pids ...int) {
	for _, pid := range pids {
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
}

// removeCgroup removes the container's cgroup parent in every hierarchy.
// runc removed the container's own group; an empty group may still be busy
// for a moment after its last process exited.
func removeCgroup(t *testing.T, name string) {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + name)
	for _, dir := range dirs {
		deadline := time.Now().Add(5 * time.Second)
		for {
			subs, _ := filepath.Glob(dir + "/*/")
			for _, s := range subs {
				if fi, err := os.Stat(s); err == nil && fi.IsDir() {
					unix.Rmdir(s)
				}
			}
			err := unix.Rmdir(dir)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("remove cgroup %s: %v", dir, err)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// logEntry is one line of a CRI log, parsed the way the kubelet does.
type logEntry struct {
	at      time.Time
	stream  string
	partial bool
	content string
}

func readLog(t *testing.T, path string) []logEntry {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read log: %v", err)
	}
	return parseLog(t, b)
}

// parseLog follows the kubelet's parseCRILog: timestamp, stream, tag,
// content, split on the first three spaces.
func parseLog(t *testing.T, b []byte) []logEntry {
	t.Helper()
	var entries []logEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), " ", 4)
		if len(fields) != 4 {
			t.Fatalf("log line %q: want 4 fields", sc.Text())
		}
		at, err := time.Parse(time.RFC3339Nano, fields[0])
		if err != nil {
			t.Fatalf("log line %q: timestamp: %v", sc.Text(), err)
		}
		if fields[1] != "stdout" && fields[1] != "stderr" {
			t.Fatalf("log line %q: stream %q", sc.Text(), fields[1])
		}
		if fields[2] != "F" && fields[2] != "P" {
			t.Fatalf("log line %q: tag %q", sc.Text(), fields[2])
		}
		entries = append(entries, logEntry{at: at, stream: fields[1], partial: fields[2] == "P", content: fields[3]})
	}
	return entries
}

// lines joins P parts with their F end, as kubectl logs shows them.
func lines(entries []logEntry) []string {
	var out []string
	var cur strings.Builder
	for _, e := range entries {
		cur.WriteString(e.content)
		if !e.partial {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes; what it waits
// for is named in the failure.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processesMentioning lists pids whose command line contains s.
func processesMentioning(s string) []int {
	var pids []int
	procstat.EachCmdline(func(pid int, cmdline string) {
		if strings.Contains(cmdline, s) {
			pids = append(pids, pid)
		}
	})
	return pids
}

// hangingRuntime is an OCI runtime whose create never returns: it writes
// its pid to pidFile and sleeps.
func hangingRuntime(t *testing.T) (path, pidFile string) {
	t.Helper()
	dir := t.TempDir()
	pidFile = filepath.Join(dir, "hung.pid")
	path = filepath.Join(dir, "hanging-runtime")
	script := "#!/bin/sh\nfor a; do if [ \"$a\" = create ]; then echo $$ > " + pidFile + "; exec sleep 60; fi; done\nexit 0\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, pidFile
}

// waitForTTYSize asks an attached shell for its terminal size until it
// answers size ("ROWS COLS"). Resize and stdin travel on separate
// goroutines, so one ask may come before the resize.
func waitForTTYSize(t *testing.T, stdin io.Writer, stdout *syncBuffer, size string) {
	t.Helper()
	waitFor(t, "stty size to print "+size, 10*time.Second, func() bool {
		io.WriteString(stdin, "stty size\n")
		time.Sleep(100 * time.Millisecond)
		return strings.Contains(stdout.String(), size)
	})
}
