//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/internal/procstat"
)

// crashEnv is CrashEnv of server/internal/lifecycle: the daemon SIGKILLs
// itself at the crash point it names.
const crashEnv = "MINICRI_TEST_CRASH_AT"

// startDaemonCrashingAt starts a daemon that kills itself with SIGKILL when
// it reaches the named crash point. Its restarts (Start again) do not crash.
func startDaemonCrashingAt(t *testing.T, point string, opts ...DaemonOption) *Daemon {
	t.Helper()
	requireCrashPoints(t)
	t.Setenv(crashEnv, point)
	d := StartDaemon(t, opts...)
	t.Setenv(crashEnv, "")
	return d
}

// requireCrashPoints fails the test at once when the daemon under test has
// no crash points: the shipped build (make build) has none, the suite's
// (make build-e2e, into bin/e2e) has them.
func requireCrashPoints(t *testing.T) {
	t.Helper()
	built, err := crashPointsBuiltIn()
	if err != nil {
		t.Fatal(err)
	}
	if !built {
		t.Fatalf("%s/minicri was built without -tags crashpoints: run the suite with MINICRI_BIN_DIR=bin/e2e (make build-e2e) or unset", binDir)
	}
}

var crashPointsBuiltIn = sync.OnceValues(func() (bool, error) {
	data, err := os.ReadFile(filepath.Join(binDir, "minicri"))
	return bytes.Contains(data, []byte(crashEnv)), err
})

// kill9 kills the daemon as a crash would and waits for it to be gone. The
// cleanup that Start registered copes with a daemon that already exited.
func (d *Daemon) kill9(t *testing.T) {
	t.Helper()
	d.Signal(syscall.SIGKILL)
	d.Wait(10 * time.Second)
	d.removeStaleSocket(t)
}

// removeStaleSocket removes the socket file a killed daemon left: Start
// takes the socket file for the sign that the daemon is up, and the next
// daemon replaces a stale one only after its start-up repair.
func (d *Daemon) removeStaleSocket(t *testing.T) {
	t.Helper()
	if err := os.Remove(d.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}

// restart kills the daemon with SIGKILL and starts it again on the same
// state root, run dir and socket.
func (d *Daemon) restart(t *testing.T) {
	t.Helper()
	d.kill9(t)
	d.Start()
	d.logLockWait(t)
}

// logLockWait logs the new daemon's wait for the state root's lock, if it
// had to: the line names the processes that still held it.
func (d *Daemon) logLockWait(t *testing.T) {
	t.Helper()
	for _, line := range strings.Split(d.Output(), "\n") {
		if strings.Contains(line, "the state root is still locked") || strings.Contains(line, "took the state root's lock") {
			t.Logf("restart waited for the lock: %s", line)
		}
	}
}

// waitCrashed waits for the daemon to die at its crash point.
func (d *Daemon) waitCrashed(t *testing.T, point string) {
	t.Helper()
	d.Wait(20 * time.Second)
	if ws, ok := d.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("daemon ended with %v, want killed by SIGKILL at %s\n%s", d.cmd.ProcessState, point, d.Output())
	}
	if !strings.Contains(d.Output(), "crash point "+point+":") {
		t.Fatalf("daemon was killed, but not at crash point %s:\n%s", point, d.Output())
	}
	d.removeStaleSocket(t)
}

// diskRecord is the part of a server record on disk the tests look at.
type diskRecord struct {
	ID, State string
	Infra     struct{ PID int }
	Monitor   struct{ PID int }
	Bundle    string
}

// records reads the records of one kind ("sandboxes" or "containers")
// straight from the state root, as a crashed daemon left them.
func (d *Daemon) records(t *testing.T, kind string) []diskRecord {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(d.Root, kind, "*.json"))
	var out []diskRecord
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var r diskRecord
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out = append(out, r)
	}
	return out
}

// containerRecord returns a container's record through verbose status.
func (d *Daemon) containerRecord(t *testing.T, id string) diskRecord {
	t.Helper()
	resp, err := d.Runtime.ContainerStatus(context.Background(), id, true)
	if err != nil {
		t.Fatalf("ContainerStatus %s: %v", id, err)
	}
	var info struct{ Record diskRecord }
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil {
		t.Fatalf("verbose info of %s: %v", id, err)
	}
	return info.Record
}

// containerPID is the container's init as the runtime recorded it.
func (d *Daemon) containerPID(t *testing.T, id string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(d.RunDir, "containers", id, "pid"))
	if err != nil {
		t.Fatalf("container pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("container pid file: %v", err)
	}
	return pid
}

// podState returns a sandbox's state and first IP.
func (d *Daemon) podState(t *testing.T, id string) (runtime.PodSandboxState, string) {
	t.Helper()
	resp, err := d.Runtime.PodSandboxStatus(context.Background(), id, false)
	if err != nil {
		t.Fatalf("PodSandboxStatus %s: %v", id, err)
	}
	return resp.GetStatus().GetState(), resp.GetStatus().GetNetwork().GetIp()
}

// execSync runs cmd in a container. ok is false, and the test goes on,
// while ExecSync is not built (Unimplemented); any other error fails.
func (d *Daemon) execSync(t *testing.T, id string, cmd ...string) (stdout string, ok bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, stderr, err := d.Runtime.ExecSync(ctx, id, cmd, 10*time.Second)
	if status.Code(err) == codes.Unimplemented {
		return "", false
	}
	if err != nil {
		t.Fatalf("ExecSync %v in %s: %v (stderr %q)", cmd, id, err, stderr)
	}
	return string(out), true
}

// removeAll stops and removes every sandbox of the daemon.
func (d *Daemon) removeAll(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods, err := d.Runtime.ListPodSandbox(ctx, nil)
	if err != nil {
		t.Fatalf("ListPodSandbox: %v", err)
	}
	for _, p := range pods {
		if err := d.Runtime.StopPodSandbox(ctx, p.GetId()); err != nil {
			t.Errorf("StopPodSandbox %s: %v", p.GetId(), err)
		}
		if err := d.Runtime.RemovePodSandbox(ctx, p.GetId()); err != nil {
			t.Errorf("RemovePodSandbox %s: %v", p.GetId(), err)
		}
	}
}

// leakCheck lists what the daemon's pods and containers may leave behind.
// Processes are given a few seconds to go: a killed monitor is reaped by
// init, not at once.
type leakCheck struct {
	pids      []int    // infra processes and monitors that must be gone
	ownMounts []string // mount points the test itself made
}

// assertNoLeaks fails the test for anything of the daemon's pods and
// containers that is still there: mounts, processes, records, pod dirs,
// bundles, root filesystems, runtime state, IP allocations, cgroups with
// processes, and the given pids.
func (d *Daemon) assertNoLeaks(t *testing.T, lc leakCheck) {
	t.Helper()
	var leaks []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		leaks = d.leaks(lc)
		if len(leaks) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(leaks) > 0 {
		t.Errorf("left behind:\n  %s", strings.Join(leaks, "\n  "))
	}
}

func (d *Daemon) leaks(lc leakCheck) []string {
	var leaks []string
	if mounts, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mounts), "\n") {
			fields := strings.Fields(line)
			if strings.Contains(line, d.Dir) && !slices.Contains(lc.ownMounts, fields[4]) {
				leaks = append(leaks, "mount: "+line)
			}
		}
	}
	daemonPID := -1
	if d.cmd != nil && d.cmd.Process != nil {
		daemonPID = d.cmd.Process.Pid
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		cmdline, err := os.ReadFile(p)
		if err != nil || pid == daemonPID || !strings.Contains(string(cmdline), d.RunDir) {
			continue
		}
		// A pod's infra process names its pod dir: it is left behind only
		// when that pod is gone.
		if args := strings.Split(string(cmdline), "\x00"); len(args) >= 4 && args[1] == "pause" && args[2] == "--pod" {
			if _, err := os.Stat(args[3]); err == nil {
				continue
			}
		}
		leaks = append(leaks, fmt.Sprintf("process %d: %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	for _, pid := range lc.pids {
		if processRunning(pid) {
			leaks = append(leaks, fmt.Sprintf("process %d still running", pid))
		}
	}
	for _, dir := range []string{
		filepath.Join(d.Root, "sandboxes"), filepath.Join(d.Root, "containers"),
		filepath.Join(d.RunDir, "pods"), filepath.Join(d.RunDir, "containers"),
		filepath.Join(d.RunDir, "monitors"), filepath.Join(d.Root, "image", "snapshots"),
	} {
		for _, name := range dirNames(dir) {
			leaks = append(leaks, "file: "+filepath.Join(dir, name))
		}
	}
	states, _ := filepath.Glob(filepath.Join(d.RunDir, "runtime", "*", "*"))
	for _, s := range states {
		leaks = append(leaks, "runtime state: "+s)
	}
	if ips := reservedIPs(filepath.Join(d.Dir, "ipam")); len(ips) > 0 {
		leaks = append(leaks, fmt.Sprintf("IP allocations: %v", ips))
	}
	leaks = append(leaks, d.strandedInits()...)
	return append(leaks, busyCgroups(d.cgroupParent())...)
}

// strandedInits lists the processes that hold a file of the daemon's
// runtime state open: a container init waiting on the exec fifo of a
// create cut short, whose command line (runc init) names nothing.
func (d *Daemon) strandedInits() []string {
	var found []string
	runtimeRoot := filepath.Join(d.RunDir, "runtime") + "/"
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		target, err := os.Readlink(fd)
		if err == nil && strings.HasPrefix(target, runtimeRoot) {
			pid := strings.Split(fd, "/")[2]
			cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
			found = append(found, fmt.Sprintf("process %s (%s) holds %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " "), target))
		}
	}
	return found
}

// infraProcesses lists the pids of the daemon's pod infra processes, found
// by their command lines (minicri-pause pause --pod RUN_DIR/pods/ID): a
// test may, knowing it forged none; the daemon never does. Each must be
// named by its pod dir's record (conmon.RecordedInfra), which is how the
// daemon finds it again after a crash.
func (d *Daemon) infraProcesses(t *testing.T) []int {
	t.Helper()
	var pids []int
	procstat.EachCmdline(func(pid int, cmdline string) {
		args := strings.Split(strings.TrimSuffix(cmdline, "\x00"), "\x00")
		if len(args) != 4 || filepath.Base(args[0]) != conmon.PauseBinaryName || args[1] != "pause" || args[2] != "--pod" ||
			filepath.Dir(args[3]) != filepath.Join(d.RunDir, "pods") || !processRunning(pid) {
			return
		}
		pids = append(pids, pid)
		if rec, err := conmon.RecordedInfra(args[3]); err != nil || rec.PID != pid {
			t.Errorf("infra process %d runs, but its pod dir %s records %+v (%v)", pid, args[3], rec, err)
		}
	})
	return pids
}

// processRunning is true for a live, non-zombie process.
func processRunning(pid int) bool { return procstat.Live(pid) }

func dirNames(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// busyCgroups lists the cgroups under parent (in every hierarchy) that
// still hold a process.
func busyCgroups(parent string) []string {
	var busy []string
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, root := range roots {
		_ = filepath.WalkDir(filepath.Join(root, parent), func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || e.Name() != "cgroup.procs" {
				return nil
			}
			if data, err := os.ReadFile(p); err == nil && len(strings.TrimSpace(string(data))) > 0 {
				busy = append(busy, "cgroup with processes: "+filepath.Dir(p))
			}
			return nil
		})
	}
	return busy
}

// runningContainer is a container config of a process that runs until it
// is killed, and logs "ready" first.
func runningContainer(name, image string) *runtime.ContainerConfig {
	return containerConfig(name, image, "sh", "-c", "echo ready; exec sleep 3600")
}

// waitLogged waits until a container's log holds want.
func (d *Daemon) waitLogged(t *testing.T, id, want string) {
	t.Helper()
	path := d.status(t, id).GetLogPath()
	waitFor(t, fmt.Sprintf("%q in the log of %s", want, id), 20*time.Second, func() bool {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), want)
	})
}

// stallProxy sits between the daemon and a registry and can hold a layer
// download half-way, so that a test kills the daemon in the middle of a pull
// at a known point rather than racing it.
type stallProxy struct {
	srv      *httptest.Server
	upstream string

	mu      sync.Mutex
	stall   bool
	blob    string        // "sha256:…": the one blob to hold, whatever its size ("": layers)
	stalled chan struct{} // closed once a download is held half-way
	release chan struct{} // closed by the test to let held downloads go on
}

func startStallProxy(t *testing.T, upstream string) *stallProxy {
	t.Helper()
	p := &stallProxy{upstream: upstream, stalled: make(chan struct{}), release: make(chan struct{})}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(func() {
		p.unstall()
		p.srv.CloseClientConnections()
		p.srv.Close()
	})
	return p
}

func (p *stallProxy) host() string { return strings.TrimPrefix(p.srv.URL, "http://") }

// stallLayers makes the next layer download stop half-way until unstall.
func (p *stallProxy) stallLayers() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stall = true
}

// stallBlob makes the next download of the blob digest stop half-way
// until unstall.
func (p *stallProxy) stallBlob(digest string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stall, p.blob = true, digest
}

func (p *stallProxy) unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stall = false
	select {
	case <-p.release:
	default:
		close(p.release)
	}
}

// layerBlobMin tells a layer from a config blob: the test image's layer is
// far bigger, its config far smaller.
const layerBlobMin = 64 << 10

func (p *stallProxy) serve(w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+p.upstream+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	if p.shouldStall(r, resp) {
		half := resp.ContentLength / 2
		_, _ = io.CopyN(w, resp.Body, half)
		w.(http.Flusher).Flush()
		p.mu.Lock()
		select {
		case <-p.stalled:
		default:
			close(p.stalled)
		}
		p.mu.Unlock()
		select {
		case <-p.release:
		case <-r.Context().Done():
			return
		}
	}
	_, _ = io.Copy(w, resp.Body)
}

func (p *stallProxy) shouldStall(r *http.Request, resp *http.Response) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stall || r.Method != http.MethodGet || resp.StatusCode != http.StatusOK {
		return false
	}
	if p.blob != "" {
		return strings.HasSuffix(r.URL.Path, "/blobs/"+p.blob)
	}
	return strings.Contains(r.URL.Path, "/blobs/") && resp.ContentLength > layerBlobMin
}

// waitStalled waits until a layer download is held half-way.
func (p *stallProxy) waitStalled(t *testing.T) {
	t.Helper()
	select {
	case <-p.stalled:
	case <-time.After(30 * time.Second):
		t.Fatal("no layer download reached the proxy within 30 s")
	}
}

// fillDisk writes a file under dir until the file system is full, and
// returns its path; removing it frees the space again.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	chunk := make([]byte, 1<<20)
	for {
		if _, err := w.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
			break
		}
	}
	// The last partial pages: byte by byte until nothing more fits.
	for {
		if _, err := f.Write(chunk[:4096]); err != nil {
			break
		}
	}
	for {
		if _, err := f.Write(chunk[:1]); err != nil {
			break
		}
	}
	return path
}

// mountTmpfs mounts a tmpfs of the given size on dir until the test ends.
// Call it before the daemon starts: cleanups run last-in first-out, so the
// daemon is stopped before the unmount.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() { unmountQuietly(dir) })
}

// bindReadOnly makes dir read-only through a read-only bind mount of
// itself; the returned undo (also run at the end of the test) removes it.
func bindReadOnly(t *testing.T, dir string) (undo func()) {
	t.Helper()
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s: %v", dir, err)
	}
	undo = func() { unmountQuietly(dir) }
	t.Cleanup(undo)
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		undo()
		t.Fatalf("remount %s read-only: %v", dir, err)
	}
	return undo
}

// unmountQuietly detaches what is mounted on dir; nothing there is fine.
func unmountQuietly(dir string) {
	for range 4 {
		if unix.Unmount(dir, unix.MNT_DETACH) != nil {
			return
		}
	}
}

// errorCode is a gRPC error's code and message, for messages.
func errorCode(err error) string {
	return fmt.Sprintf("%v: %s", status.Code(err), status.Convert(err).Message())
}
