package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// errNoFifoStart says that a container cannot be started by its exec fifo,
// and `runtime start` must do it.
var errNoFifoStart = errors.New("no start by the exec fifo")

// startByFifo does what `runc start` does for a container that runc created:
// it opens the exec fifo that the container's init (`runc init`) waits on,
// removes it (runc's state then reads running), and takes the byte the init
// writes before it execs the container's process. Doing it
// here spares a runc process on every container start, the largest part of
// StartContainer.
//
// It returns errNoFifoStart, having changed nothing, wherever runc start
// would do more or where the layout is not one it knows: another runtime
// (crun keeps no state.json), no known root, poststart hooks (runc runs them
// around the start), an init or fifo that is missing (runc start then gives
// its own error). The daemon's own NOTIFY_SOCKET (under systemd) is not the
// container's: runc never sees it (runtimeEnv), so it changes nothing here.
func (r *Runtime) startByFifo(ctx context.Context, id string) error {
	if r.Root == "" {
		return errNoFifoStart
	}
	dir := filepath.Join(r.Root, id)
	st, err := readRuncState(dir)
	if err != nil || st.InitPID <= 0 || hasHook(st.Config.Hooks, "poststart") {
		return errNoFifoStart
	}
	init, err := openInit(st.InitPID, st.InitStart)
	if err != nil {
		return errNoFifoStart
	}
	defer unix.Close(init)
	fifoPath := filepath.Join(dir, runcExecFifo)
	// Read and write: the open does not wait for the init, and a read never
	// sees an end of file before the init's byte; the init's exit is seen
	// on its pidfd instead.
	fifo, err := unix.Open(fifoPath, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return errNoFifoStart
	}
	defer unix.Close(fifo)
	// The open has let the init go on (its open for writing no longer
	// waits): the fifo goes at once, so that a daemon killed from here on
	// leaves what runc reads as running, which it is about to be. The init
	// writes through the descriptor it holds, not the path.
	if err := os.Remove(fifoPath); err != nil {
		return r.failure(ctx, "start", id, "remove the exec fifo", err)
	}
	if err := awaitInitByte(ctx, fifo, init); err != nil {
		return r.failure(ctx, "start", id, err.Error(), err)
	}
	return nil
}

// fifoPollSlice bounds each wait, so that a context that ends is seen.
const fifoPollSlice = 100 * time.Millisecond

// awaitInitByte waits for the init's byte on fifo, until the init exits
// (its pidfd turns readable) or ctx ends. A byte that is there wins over an
// exit: an init that wrote it and exec'd a process that ended at once has
// started.
func awaitInitByte(ctx context.Context, fifo, init int) error {
	for {
		fds := []unix.PollFd{{Fd: int32(fifo), Events: unix.POLLIN}, {Fd: int32(init), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(fifoPollSlice/time.Millisecond)); err != nil && err != unix.EINTR {
			return fmt.Errorf("wait for the exec fifo: %w", err)
		}
		var b [1]byte
		if n, err := unix.Read(fifo, b[:]); n == 1 {
			return nil
		} else if err != nil && err != unix.EAGAIN {
			return fmt.Errorf("read the exec fifo: %w", err)
		}
		if fds[1].Revents != 0 {
			return errors.New("container process is already dead")
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
