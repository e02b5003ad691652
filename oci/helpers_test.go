package oci

import (
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
)

// sharedRootfs is one busybox root filesystem for every integration test of
// this package run; containers do not change it except where a test says.
var sharedRootfs string

func TestMain(m *testing.M) {
	code := func() int {
		if os.Geteuid() == 0 {
			// Created containers are reparented to us, so that the tests can
			// reap them and read their exit codes.
			if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
				fmt.Fprintln(os.Stderr, "set child subreaper:", err)
				return 1
			}
			dir, err := os.MkdirTemp("", "oci-rootfs-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			if err := makeBusyboxRootfs(dir); err != nil {
				fmt.Fprintln(os.Stderr, "make rootfs:", err)
				return 1
			}
			sharedRootfs = dir
			if shimDir, err := os.MkdirTemp("", "oci-shim-"); err == nil {
				defer os.RemoveAll(shimDir)
				execShim = buildExecShim(shimDir)
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// execShim is a minicri-conmon built for the exec tests, "" when the
// build failed (those tests then skip).
var execShim string

func buildExecShim(dir string) string {
	bin := filepath.Join(dir, "minicri-conmon")
	build := exec.Command("go", "build", "-o", bin, "github.com/minicri/minicri/cmd/minicri-conmon")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build minicri-conmon: %v\n%s", err, out)
		return ""
	}
	return bin
}

var busyboxApplets = []string{
	"sh", "id", "cat", "cut", "grep", "touch", "hostname", "sleep", "dd", "wc",
	"unshare", "head", "echo", "true", "ls", "stat", "mount",
}

// makeBusyboxRootfs copies the static busybox into dir with its applets and
// a passwd and group that the user tests rely on.
func makeBusyboxRootfs(dir string) error {
	// MkdirTemp made dir 0700: non-root users in the container must reach /bin.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "tmp", "root", "home/app"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := copyFile("/bin/busybox", filepath.Join(dir, "bin/busybox"), 0o755); err != nil {
		return err
	}
	for _, a := range busyboxApplets {
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", a)); err != nil {
			return err
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n",
		"etc/group":  "root:x:0:\napp:x:1000:\nextra:x:2000:app\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

func randomSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// testRuntime returns a runtime with a private state root, skipping when the
// binary is missing.
func testRuntime(t *testing.T, binary string) *Runtime {
	t.Helper()
	requireRoot(t)
	if _, err := exec.LookPath(binary); err != nil {
		t.Skipf("%s not installed", binary)
	}
	return &Runtime{Path: binary, Root: t.TempDir()}
}

// testCgroupParent returns a fresh cgroup parent and removes it, in every
// hierarchy, when the test ends.
func testCgroupParent(t *testing.T) string {
	t.Helper()
	parent := "/minicri-oci-test-" + randomSuffix(t)
	t.Cleanup(func() { removeCgroupTree(t, parent) })
	return parent
}

// removeCgroupTree removes parent and any child left in every mounted
// hierarchy, children first, retrying while the kernel still counts exiting
// tasks.
func removeCgroupTree(t *testing.T, parent string) {
	hierarchies, _ := filepath.Glob(filepath.Join(cgroupRoot, "*"))
	hierarchies = append(hierarchies, cgroupRoot)
	for _, h := range hierarchies {
		dir := filepath.Join(h, parent)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		children, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, c := range children {
			if fi, err := os.Stat(c); err == nil && fi.IsDir() {
				rmdirWithRetry(t, c)
			}
		}
		rmdirWithRetry(t, dir)
	}
}

func rmdirWithRetry(t *testing.T, dir string) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("remove cgroup %s: %v", dir, err)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testContainer is a created container of an integration test.
type testContainer struct {
	rt     *Runtime
	id     string
	bundle string
	out    string // path of the container's stdout+stderr
	pid    int
}

// baseSpec is a minimal unprivileged container on the shared rootfs.
func baseSpec(t *testing.T, args ...string) ContainerSpec {
	t.Helper()
	return ContainerSpec{
		ID:           "c-" + randomSuffix(t),
		Rootfs:       sharedRootfs,
		Args:         args,
		Env:          MergeEnv(nil, nil),
		CgroupParent: testCgroupParent(t),
	}
}

// createContainer generates and writes the spec, then creates the container
// with its output in a file; cleanup kills, reaps and deletes it.
func createContainer(t *testing.T, rt *Runtime, c ContainerSpec) *testContainer {
	t.Helper()
	return createEditedContainer(t, rt, c, func(*specs.Spec) {})
}

// createEditedContainer is createContainer with a change to the generated
// spec, for what GenerateSpec never writes (hooks, say).
func createEditedContainer(t *testing.T, rt *Runtime, c ContainerSpec, edit func(*specs.Spec)) *testContainer {
	t.Helper()
	s, err := GenerateSpec(c)
	if err != nil {
		t.Fatalf("GenerateSpec: %v", err)
	}
	edit(s)
	bundle := t.TempDir()
	if err := WriteSpec(bundle, s); err != nil {
		t.Fatalf("WriteSpec: %v", err)
	}
	outPath := filepath.Join(bundle, "out")
	out, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tc := &testContainer{rt: rt, id: c.ID, bundle: bundle, out: outPath}
	t.Cleanup(tc.destroy)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := runtimeCreate(ctx, rt, c.ID, bundle, out); err != nil {
		t.Fatalf("Create: %v", err)
	}
	st, err := rt.State(ctx, c.ID)
	if err != nil {
		t.Fatalf("State after create: %v", err)
	}
	tc.pid = st.Pid
	return tc
}

// runtimeCreate runs the runtime's create as the monitor does (the daemon
// itself never creates a container): errors come from the runtime's --log,
// because its stderr is the container's. out, when set, gets the container's
// stdout and stderr.
func runtimeCreate(ctx context.Context, rt *Runtime, id, bundle string, out *os.File) error {
	logPath := filepath.Join(bundle, "runtime.log")
	cmd, err := rt.command(ctx, logPath, "create", "--bundle", bundle, id)
	if err != nil {
		return err
	}
	if out != nil {
		cmd.Stdout, cmd.Stderr = out, out
	}
	if err := cmd.Run(); err != nil {
		log, _ := os.ReadFile(logPath)
		return rt.failure(ctx, "create", id, lastLogError(log), err)
	}
	return nil
}

// destroy kills and reaps the container's init, then deletes the container.
func (tc *testContainer) destroy() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if tc.pid > 0 {
		_ = unix.Kill(tc.pid, unix.SIGKILL)
		_, _ = tc.wait(5 * time.Second)
	}
	_ = tc.rt.Delete(ctx, tc.id, true, "")
}

// wait reaps the container's init (we are its subreaper) and returns its exit
// code, 128+signal when a signal ended it.
func (tc *testContainer) wait(timeout time.Duration) (int, error) {
	type result struct {
		status unix.WaitStatus
		err    error
	}
	pid := tc.pid
	if pid <= 0 {
		return 0, errors.New("container already reaped")
	}
	done := make(chan result, 1)
	go func() {
		var ws unix.WaitStatus
		_, err := unix.Wait4(pid, &ws, 0, nil)
		for errors.Is(err, unix.EINTR) {
			_, err = unix.Wait4(pid, &ws, 0, nil)
		}
		done <- result{ws, err}
	}()
	result2exit := func(r result) (int, error) {
		if r.err != nil {
			return 0, fmt.Errorf("wait for container %s (pid %d): %w", tc.id, pid, r.err)
		}
		if r.status.Signaled() {
			return 128 + int(r.status.Signal()), nil
		}
		return r.status.ExitStatus(), nil
	}
	select {
	case r := <-done:
		tc.pid = 0
		return result2exit(r)
	case <-time.After(timeout):
	}
	_ = unix.Kill(pid, unix.SIGKILL)
	select {
	case r := <-done:
		tc.pid = 0
		_, err := result2exit(r)
		return 0, fmt.Errorf("container %s did not exit within %v and was killed (wait: %v)", tc.id, timeout, err)
	case <-time.After(5 * time.Second):
		// An init that cannot finish (a zombie of its namespace that nobody
		// reaps) would block the test forever; leave it to the report.
		return 0, fmt.Errorf("container %s (pid %d) did not die within 5s of SIGKILL", tc.id, pid)
	}
}

// reapChild waits until pid is gone, reaping it when it is our child: a
// process whose runtime parent died is reparented to us, the subreaper, and
// its zombie would keep its pid namespace's init from exiting.
func reapChild(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if got == pid || (errors.Is(err, unix.ECHILD) && processGone(pid)) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d still alive after %v", pid, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runToExit starts a created container, waits for it and returns its exit
// code and output.
func (tc *testContainer) runToExit(t *testing.T) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tc.rt.Start(ctx, tc.id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	code, err := tc.wait(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(tc.out)
	if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

// runContainer creates, starts and waits for a container, returning its exit
// code and output.
func runContainer(t *testing.T, rt *Runtime, c ContainerSpec) (int, string) {
	t.Helper()
	return createContainer(t, rt, c).runToExit(t)
}

// outputField returns the value after "key=" on a line of a container's
// output, "" when absent.
func outputField(out, key string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
