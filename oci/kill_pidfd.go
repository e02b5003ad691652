package oci

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// errNoPidfdKill says that a signal cannot be sent by a pidfd of the
// container's init, and `runtime kill` must send it.
var errNoPidfdKill = errors.New("no kill by pidfd")

// killByPidfd does what `runc kill` does for a container runc created: it
// signals the container's init, through a pidfd checked against the start
// time in runc's state, so that a later process that reused the pid is
// never signalled. Doing it here spares a runc process on every stop, which
// StopPodSandbox runs beside the CNI DEL on a node's few cores.
//
// With all (every process of the container), only a SIGKILL to an init that
// is PID 1 of its own namespace is the same thing: the kernel then kills
// the whole namespace. Anything else, a shared or the host's PID namespace,
// another runtime (no state.json), an init already gone, returns
// errNoPidfdKill having sent nothing, and runc kill says what it says.
func (r *Runtime) killByPidfd(ctx context.Context, id string, sig syscall.Signal, all bool) error {
	if r.Root == "" {
		return errNoPidfdKill
	}
	st, err := readRuncState(filepath.Join(r.Root, id))
	if err != nil || st.InitPID <= 0 {
		return errNoPidfdKill
	}
	if all && (sig != syscall.SIGKILL || !st.ownsPIDNamespace()) {
		return errNoPidfdKill
	}
	init, err := openInit(st.InitPID, st.InitStart)
	if err != nil {
		return errNoPidfdKill
	}
	defer unix.Close(init)
	err = unix.PidfdSendSignal(init, sig, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return errNoPidfdKill // exited since it was opened
	}
	if err != nil {
		return r.failure(ctx, "kill", id, "signal the init by its pidfd", err)
	}
	return nil
}
