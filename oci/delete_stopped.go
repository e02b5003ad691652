package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/minicri/minicri/internal/procstat"
)

// errNoOwnDelete says that the runtime's own delete must remove the
// container.
var errNoOwnDelete = errors.New("no delete without the runtime")

// deleteStopped does what `runc delete` does for a container runc created
// whose init is gone: it kills what is left in the container's cgroup (in
// a shared PID namespace the init's children outlive it), removes that
// cgroup and runc's state directory. Doing it here spares a runc process on
// every removal of a stopped container, most of RemovePodSandbox's time on
// a node's few cores, as killByPidfd spares one on every stop.
//
// Anything else returns errNoOwnDelete having done nothing: another runtime
// (no runc state.json), an init still there, poststop hooks (runc runs them
// at delete), the systemd driver (runc's delete stops the container's scope
// unit), or no cgroups path from minicri's spec, or one not named after
// the container (an NRI plugin moved it).
func (r *Runtime) deleteStopped(ctx context.Context, id, cgroupsPath string) error {
	if r.Root == "" || r.SystemdCgroup || cgroupsPath == "" || !validStateName(id) {
		return errNoOwnDelete
	}
	dir := filepath.Join(r.Root, id)
	st, err := readRuncState(dir)
	if err != nil || st.InitPID <= 0 || hasHook(st.Config.Hooks, "poststop") || !initGone(st.InitPID, st.InitStart) {
		return errNoOwnDelete
	}
	rel, err := containerCgroup(id, cgroupsPath, CgroupfsDriver)
	if err != nil || rel == "" {
		return errNoOwnDelete // not the container's own cgroup: runc decides
	}
	if err := killCgroup(cgroupHierarchies(), rel, strandedWait(ctx)); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("delete %s: remove runc state: %w", id, err)
	}
	return nil
}

// initGone reports whether the init runc recorded (pid, start time) has
// exited: no such process, a later one with its pid, or a zombie. A /proc
// that cannot be read says nothing, and runc decides.
func initGone(pid int, start uint64) bool {
	s, err := procstat.Read(pid)
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	return err == nil && (s.StartTime != start || !s.Live())
}

// validStateName reports whether id names a directory of its own under a
// runtime root.
func validStateName(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsRune(id, '/')
}
