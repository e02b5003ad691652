package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/tracing"
	"github.com/minicri/minicri/oci/runcflags"
)

// Runtime drives one OCI runtime binary (runc, or crun, which takes the same
// command line) with its global options. Every call runs one runtime process
// and is bounded by its context: a context that ends kills the process.
// Use a Runtime by pointer and do not copy it after first use.
type Runtime struct {
	// Name is the runtime handler's name, used in messages; "" uses the
	// binary's base name.
	Name string
	// Path is the runtime binary; a bare name is looked up in PATH until
	// found, then kept.
	Path string
	// Root is the runtime's state directory (--root); "" is the runtime's own
	// default. Give each handler its own, e.g. /run/minicri/runc.
	Root string
	// SystemdCgroup makes the runtime manage cgroups through systemd; spec
	// cgroup paths must then be slice:prefix:name (see CgroupsPath).
	SystemdCgroup bool
	// ExecShim, when set, is minicri-conmon: a streamed exec then runs the
	// runtime detached under "ExecShim exec", which waits for the process,
	// so the runtime does not copy its output (with a terminal, the
	// runtime hands over the container's pty through a console socket).
	ExecShim string
	// FeaturesCache, when set, is a private directory where the answer of
	// `features` is kept for the next daemon start, for as long as the
	// binary is the same file (features_cache.go). Only a successful
	// answer is kept.
	FeaturesCache string

	resolveMu sync.Mutex
	resolved  string

	featuresOnce sync.Once
	features     Features
	featuresErr  error
}

// Status is a container's state as the runtime reports it.
type Status string

const (
	StatusCreating Status = "creating"
	StatusCreated  Status = "created"
	StatusRunning  Status = "running"
	StatusPaused   Status = "paused"
	StatusStopped  Status = "stopped"
)

// State is the runtime's view of a container.
type State struct {
	ID          string            `json:"id"`
	Status      Status            `json:"status"`
	Pid         int               `json:"pid"`
	Bundle      string            `json:"bundle"`
	Rootfs      string            `json:"rootfs"`
	Created     time.Time         `json:"created"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// maxRuntimeOutput bounds what is kept of a runtime's stdout or stderr.
const maxRuntimeOutput = 1 << 20

// waitDelay bounds the wait for a killed runtime's output pipes to close.
const waitDelay = 2 * time.Second

// Binary returns the runtime's executable, resolved from PATH for a bare name.
// A failure is not kept: a runtime installed after the daemon started is
// found by the next call.
func (r *Runtime) Binary() (string, error) {
	r.resolveMu.Lock()
	defer r.resolveMu.Unlock()
	if r.resolved != "" {
		return r.resolved, nil
	}
	path, err := r.lookPath()
	if err != nil {
		return "", err
	}
	r.resolved = path
	return path, nil
}

// Available says why the runtime's binary cannot be run now, or nil. It
// looks again each time (a stat per PATH entry at most), so that a binary
// removed or installed meanwhile is seen.
func (r *Runtime) Available() error {
	_, err := r.lookPath()
	return err
}

func (r *Runtime) lookPath() (string, error) {
	path := r.Path
	if path == "" {
		path = "runc"
	}
	found, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("runtime %s: %w", r.name(), err)
	}
	return found, nil
}

func (r *Runtime) name() string {
	if r.Name != "" {
		return r.Name
	}
	if r.Path != "" {
		return filepath.Base(r.Path)
	}
	return "runc"
}

// globalArgs are the options before the subcommand; logPath adds --log in
// JSON form, for calls whose stderr belongs to the container.
func (r *Runtime) globalArgs(logPath string) []string {
	g := runcflags.Global{Root: r.Root, SystemdCgroup: r.SystemdCgroup, Log: logPath, LogJSON: logPath != ""}
	return g.Args()
}

// command builds the runtime command for a call whose stdio the caller owns.
func (r *Runtime) command(ctx context.Context, logPath string, args ...string) (*exec.Cmd, error) {
	bin, err := r.Binary()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, append(r.globalArgs(logPath), args...)...)
	cmd.Env = runtimeEnv()
	cmd.WaitDelay = waitDelay
	return cmd, nil
}

// span starts the span of one runtime operation on container id; name is
// a constant ("runtime.kill"), so that tracing off costs nothing here.
func (r *Runtime) span(ctx context.Context, name, id string) (context.Context, trace.Span) {
	return tracing.Start(ctx, name, tracing.ContainerID.String(id), tracing.Handler.String(r.name()))
}

// run runs a call whose output is the runtime's own and returns its stdout; a
// failure carries the runtime's message from stderr.
func (r *Runtime) run(ctx context.Context, stdin []byte, op, id string, args ...string) ([]byte, error) {
	cmd, err := r.command(ctx, "", args...)
	if err != nil {
		return nil, err
	}
	var stdout, stderr cappedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return nil, r.failure(ctx, op, id, runtimeMessage(stderr.Bytes()), err)
	}
	return stdout.Bytes(), nil
}

// Start runs the container's process, created earlier by Create, by
// `runtime start`: the runtime's exec fifo and state file are its own
// business, not an interface.
func (r *Runtime) Start(ctx context.Context, id string) (err error) {
	ctx, span := r.span(ctx, "runtime.start", id)
	defer func() { tracing.End(span, err) }()
	_, err = r.run(ctx, nil, "start", id, "start", id)
	return err
}

// State reports the container's status, pid and bundle; ErrNotFound when the
// runtime does not know it.
func (r *Runtime) State(ctx context.Context, id string) (_ State, err error) {
	ctx, span := r.span(ctx, "runtime.state", id)
	defer func() { tracing.End(span, err) }()
	out, err := r.run(ctx, nil, "state", id, "state", id)
	if err != nil {
		return State{}, err
	}
	var st State
	if err := json.Unmarshal(out, &st); err != nil {
		return State{}, fmt.Errorf("%s state %s: decode %q: %w", r.name(), id, truncate(out, 200), err)
	}
	return st, nil
}

// Kill sends sig to the container's init, or with all to every process in
// it, by `runtime kill`, which checks the init it signals against its own
// record of it.
func (r *Runtime) Kill(ctx context.Context, id string, sig syscall.Signal, all bool) (err error) {
	ctx, span := r.span(ctx, "runtime.kill", id)
	defer func() { tracing.End(span, err) }()
	args := []string{"kill"}
	if all {
		args = append(args, "--all")
	}
	args = append(args, id, strconv.Itoa(int(sig)))
	_, err = r.run(ctx, nil, "kill", id, args...)
	return err
}

// Delete removes the container's runtime state and cgroup; force kills it
// first if it still runs. Deleting an unknown container succeeds, so that a
// retry after a partial failure is safe. cgroupsPath is the cgroup the
// container's spec names ("" when none was written): with force, what a
// runtime that did not know the container leaves in it (a stranded init,
// see stranded_init.go) is killed, and the cgroup removed.
func (r *Runtime) Delete(ctx context.Context, id string, force bool, cgroupsPath string) (err error) {
	ctx, span := r.span(ctx, "runtime.delete", id)
	defer func() { tracing.End(span, err) }()
	args := []string{"delete"}
	if force {
		args = append(args, "--force")
	}
	stranded := force && r.unknown(id)
	_, err = r.run(ctx, nil, "delete", id, append(args, id)...)
	if err == nil || errors.Is(err, ErrNotFound) {
		// runc's delete --force of a container it does not know succeeds,
		// whatever it could not remove.
		err = r.removeAbortedState(id)
		if stranded {
			err = errors.Join(err, removeStranded(ctx, id, cgroupsPath, r.cgroupDriver()))
		}
		return err
	}
	return err
}

// cgroupDriver is the driver the runtime's cgroup paths are written for.
func (r *Runtime) cgroupDriver() CgroupDriver {
	if r.SystemdCgroup {
		return SystemdDriver
	}
	return CgroupfsDriver
}

// unknown reports whether the runtime has no state.json for id under our
// root: a create that never ran, or one cut short, whose init the runtime's
// delete does not kill (see stranded_init.go). Only then is it worth
// looking in the container's cgroup for that init.
func (r *Runtime) unknown(id string) bool {
	if r.Root == "" || !validStateName(id) {
		return false
	}
	_, err := os.Lstat(filepath.Join(r.Root, id, "state.json"))
	return errors.Is(err, os.ErrNotExist)
}

// removeAbortedState removes what a runtime killed in its create leaves in
// its state directory: no state.json (so the runtime does not know the
// container) but its files, and in runc 1.1 a read-only bind mount of its
// own binary (runc.XXXXXX, made while it clones itself). runc's delete then
// removes the directory, but not through the mount: EBUSY, and the
// directory stays. A create is killed when its monitor is (a deadline, a
// daemon restart rolling it back), so each mount below the directory is
// detached, then the directory goes. Only with Root set: the runtime's own
// default is not ours to clean.
func (r *Runtime) removeAbortedState(id string) error {
	if r.Root == "" || !validStateName(id) {
		return nil
	}
	dir := filepath.Join(r.Root, id)
	if _, err := os.Lstat(filepath.Join(dir, "state.json")); !errors.Is(err, os.ErrNotExist) {
		return nil // a container the runtime knows, or no directory to look in
	}
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := unmountBelow(dir); err != nil {
		return fmt.Errorf("state of %s: %w", id, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove state of %s: %w", id, err)
	}
	return nil
}

// unmountBelow detaches every mount at or below dir, the deepest first.
func unmountBelow(dir string) error {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return err
	}
	var points []string
	for _, m := range mounts {
		points = append(points, m.Mountpoint)
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return nil
}

// Update changes a running container's cgroup limits.
func (r *Runtime) Update(ctx context.Context, id string, res *specs.LinuxResources) (err error) {
	ctx, span := r.span(ctx, "runtime.update", id)
	defer func() { tracing.End(span, err) }()
	if res == nil {
		return nil
	}
	data, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode resources for %s: %w", id, err)
	}
	// Both runc and crun read --resources from a file; /dev/stdin names our
	// pipe and saves a temp file.
	_, err = r.run(ctx, data, "update", id, "update", "--resources", "/dev/stdin", id)
	return err
}

// cappedBuffer keeps the first maxRuntimeOutput bytes written to it and
// discards the rest, so that a runaway runtime cannot grow the daemon.
type cappedBuffer struct{ bytes.Buffer }

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := maxRuntimeOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// readPidFile reads a pid written by the runtime's --pid-file.
func readPidFile(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s holds %q", path, truncate(data, 32))
	}
	return pid, nil
}

// validStateName reports whether id names a directory of its own under a
// runtime root.
func validStateName(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsRune(id, '/')
}
