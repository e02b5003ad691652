package oci

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/procstat"
)

// runc's files in a container's state directory (<root>/<id>): the state it
// wrote at create, and the fifo its waiting init opens for writing.
const (
	runcStateFile = "state.json"
	runcExecFifo  = "exec.fifo"
)

// runcState is the part of runc's state.json that the daemon's own start
// and kill read: the init, checked by its start time, the hooks and the
// namespaces.
type runcState struct {
	InitPID   int    `json:"init_process_pid"`
	InitStart uint64 `json:"init_process_start"`
	Config    struct {
		Hooks      map[string]json.RawMessage `json:"hooks"`
		Namespaces []struct {
			Type string `json:"type"`
			Path string `json:"path"`
		} `json:"namespaces"`
	} `json:"config"`
}

// ownsPIDNamespace reports whether the container's init is PID 1 of a
// namespace of its own: killing it then kills every process in it.
func (st runcState) ownsPIDNamespace() bool {
	for _, ns := range st.Config.Namespaces {
		if ns.Type == "NEWPID" {
			return ns.Path == ""
		}
	}
	return false
}

func readRuncState(dir string) (runcState, error) {
	var st runcState
	data, err := os.ReadFile(filepath.Join(dir, runcStateFile))
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(data, &st)
}

// hasHook reports whether hooks has a non-empty list under name.
func hasHook(hooks map[string]json.RawMessage, name string) bool {
	var list []json.RawMessage
	return json.Unmarshal(hooks[name], &list) == nil && len(list) > 0
}

// openInit returns a pidfd of the container's init, checked against the start
// time runc recorded so that a later process that reused the pid is not
// taken for it.
func openInit(pid int, start uint64) (int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, fmt.Errorf("pidfd of init %d: %w", pid, err)
	}
	if s, err := procstat.Read(pid); err != nil || s.StartTime != start || !s.Live() {
		unix.Close(fd)
		return -1, fmt.Errorf("init %d is not the one runc started", pid)
	}
	return fd, nil
}
