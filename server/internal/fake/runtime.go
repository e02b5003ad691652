package fake

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/minicri/minicri/oci"
)

// Runtimes are fake OCI runtimes by handler name, picked as the daemon
// picks its real ones.
type Runtimes = oci.HandlerSet[*Runtime]

// Runtime is an OCI runtime whose containers are entries in a map. A
// container is there once started; a Kill calls OnKill, which a test wires
// to Monitor.Exit so that the container's exit is seen as with runc.
type Runtime struct {
	Failures
	// OnKill, when set, runs after each Kill.
	OnKill func(id string, sig syscall.Signal)
	// ExecCode and ExecStdout are what every Exec gives.
	ExecCode   int
	ExecStdout string
	// Feats are what Features reports.
	Feats oci.Features
	// CheckpointBlocks makes Checkpoint wait for the end of its context.
	CheckpointBlocks bool
	// Emptied is what CgroupEmptied reports: no process left in a
	// container's cgroup.
	Emptied bool
	// CheckpointPages, when set, is the size of the page image Checkpoint
	// writes (written bytes, not a hole).
	CheckpointPages int

	mu       sync.Mutex
	running  map[string]bool
	updates  map[string]*specs.LinuxResources
	deleted  map[string]int
	forced   map[string]int
	kills    []syscall.Signal
	execArgs [][]string
	paused   map[string]bool
}

func NewRuntime() *Runtime {
	return &Runtime{running: map[string]bool{}, updates: map[string]*specs.LinuxResources{}, deleted: map[string]int{}, forced: map[string]int{}}
}

func (r *Runtime) Start(ctx context.Context, id string) error {
	return r.locked("Start", &r.mu, func() {
		r.running[id] = true
	})
}

// State says running, with the test's own pid, for a started container.
func (r *Runtime) State(ctx context.Context, id string) (oci.State, error) {
	if err := r.err("State"); err != nil {
		return oci.State{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.running[id] {
		return oci.State{}, fmt.Errorf("container %s: %w", id, oci.ErrNotFound)
	}
	return oci.State{ID: id, Status: oci.StatusRunning, Pid: syscall.Getpid()}, nil
}

func (r *Runtime) Kill(ctx context.Context, id string, sig syscall.Signal, all bool) error {
	if err := r.err("Kill"); err != nil {
		return err
	}
	r.mu.Lock()
	r.kills = append(r.kills, sig)
	delete(r.running, id)
	onKill := r.OnKill
	r.mu.Unlock()
	if onKill != nil {
		onKill(id, sig)
	}
	return nil
}

// CgroupEmptied reports Emptied.
func (r *Runtime) CgroupEmptied(id, cgroupsPath string) bool { return r.Emptied }

// Kills lists the signals sent, in order.
func (r *Runtime) Kills() []syscall.Signal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]syscall.Signal(nil), r.kills...)
}

// Delete without force refuses a container that still runs, as runc's
// does; with force it ends it first.
func (r *Runtime) Delete(ctx context.Context, id string, force bool, cgroupsPath string) error {
	if err := r.err("Delete"); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !force && r.running[id] {
		return fmt.Errorf("cannot delete container %s that is not stopped: running", id)
	}
	delete(r.running, id)
	r.deleted[id]++
	if force {
		r.forced[id]++
	}
	return nil
}

// Deleted counts the deletes of a container.
func (r *Runtime) Deleted(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deleted[id]
}

// Forced counts the deletes of a container that were forced.
func (r *Runtime) Forced(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.forced[id]
}

func (r *Runtime) Update(ctx context.Context, id string, res *specs.LinuxResources) error {
	return r.locked("Update", &r.mu, func() {
		r.updates[id] = res
	})
}

// Updated returns the resources of the last Update of a container.
func (r *Runtime) Updated(id string) *specs.LinuxResources {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.updates[id]
}

// Exec writes ExecStdout and returns ExecCode; it honours the context as
// runc exec does.
func (r *Runtime) Exec(ctx context.Context, id, stateDir string, proc *specs.Process, o oci.ExecIO) (int, error) {
	if err := r.err("Exec"); err != nil {
		return -1, err
	}
	if err := ctx.Err(); err != nil {
		return -1, err
	}
	r.mu.Lock()
	r.execArgs = append(r.execArgs, proc.Args)
	r.mu.Unlock()
	if o.Stdout != nil {
		if _, err := io.WriteString(o.Stdout, r.ExecStdout); err != nil {
			return -1, err
		}
	}
	return r.ExecCode, nil
}

// Execs lists the args of each Exec.
func (r *Runtime) Execs() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]string(nil), r.execArgs...)
}

func (r *Runtime) Available() error                { return r.err("Available") }
func (r *Runtime) Features() (oci.Features, error) { return r.Feats, r.err("Features") }
func (r *Runtime) Binary() (string, error)         { return "/usr/bin/fake-runc", r.err("Binary") }
func (r *Runtime) StateRoot() string               { return "" }
func (r *Runtime) SystemdCgroup() bool             { return false }

// Pause freezes a running container; Paused tells whether it is frozen.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	if err := r.err("Pause"); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.running[id] {
		return fmt.Errorf("container %s: %w", id, oci.ErrNotFound)
	}
	if r.paused == nil {
		r.paused = map[string]bool{}
	}
	r.paused[id] = true
	return nil
}

func (r *Runtime) Resume(ctx context.Context, id string) error {
	return r.locked("Resume", &r.mu, func() { delete(r.paused, id) })
}

// Paused tells whether a container is frozen by Pause.
func (r *Runtime) Paused(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.paused[id]
}

// Checkpoint writes a page image and a dump.log as CRIU would, unless
// it fails or CheckpointBlocks makes it wait for the end of ctx, as a
// runtime that is killed at the deadline does.
func (r *Runtime) Checkpoint(ctx context.Context, id, imagesDir, workDir string) error {
	if err := r.err("Checkpoint"); err != nil {
		return err
	}
	if r.CheckpointBlocks {
		<-ctx.Done()
		return ctx.Err()
	}
	r.mu.Lock()
	frozen := r.paused[id]
	r.mu.Unlock()
	if !frozen {
		return fmt.Errorf("fake: checkpoint of %s while it runs: pause it first", id)
	}
	pages := []byte("pages")
	if r.CheckpointPages > 0 {
		pages = bytes.Repeat([]byte("p"), r.CheckpointPages)
	}
	if err := os.WriteFile(filepath.Join(imagesDir, "pages-1.img"), pages, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(workDir, "dump.log"), []byte("Dumping finished successfully\n"), 0o600)
}
