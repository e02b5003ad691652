// Package monitor is the body of minicri-conmon, the process that sits beside
// each container: it runs the OCI runtime's create, holds the container's
// stdio, writes the CRI log, serves attach and control sockets, reaps the
// container as child subreaper and writes its exit file.
//
// One process serves one container or, when the daemon shares it, several
// (a pool, see pool.go), so it is built to stay small: one goroutine runs an
// epoll loop over raw descriptors, one buffer serves every stream, the
// steady state allocates nothing and the garbage collector never runs. The
// process creates its first container (Run) and serves it; further
// containers are created by short-lived join helpers (Join), which hand
// them over. Only the standard library's smallest packages and x/sys are
// used.
package monitor

import (
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon/wire"
)

// drainTimeout bounds how long the monitor keeps reading output after the
// container's init exited: a pipe whose writer is gone ends at once, but a
// process outside the container's PID namespace may still hold it.
const drainTimeout = time.Second

// monitor is the state of one container in the monitor process. Everything
// is touched by the one goroutine that runs the loop; nothing needs a lock.
type monitor struct {
	cfg     wire.Config
	syncFD  int // the pipe (or join connection) to the daemon until the monitor reported, else -1
	epfd    int // the pool's
	tags    *epollTags
	buf     []byte // the pool's: buf[0] is a frame type, buf[1:] one read of output or one client frame
	log     *logWriter
	logMade bool // the monitor created the log file: a failed start removes it

	stdout, stderr output // fd -1 once closed; with a tty only stdout, the pty master
	stdin          int    // stdin pipe or pty master, -1 when there is none (any more)
	stdinPending   []byte // written to stdin once it is writable again
	stdinWatched   bool   // stdin is registered for EPOLLOUT
	// stdinCloseAfterFlush: a stdin-once session ended while its bytes
	// still wait for the container; stdin closes once they are in.
	stdinCloseAfterFlush bool

	attachFD, controlFD int
	clients             []*client
	waiters             []int // control connections that asked to wait for the end

	// The container's init is a child once the runtime's create exited; its
	// pidfd turns readable when it exits. The runtime's SIGCHLD handling
	// would cost a thread parked for signals, the pidfd costs nothing.
	pidFD int
	// sharedPIDNS: the container runs in the monitor's PID namespace, and
	// its orphans come to the monitor, which reaps them now and then.
	sharedPIDNS bool

	containerPID int
	oom          oomCounter
	exit         *wire.ExitStatus // set when the container's init has been reaped
	drainUntil   int64            // unix nanoseconds; reading stops then even without EOF
}

type output struct {
	fd     int
	stream string // "stdout" or "stderr", the CRI log's stream name
	frame  byte   // wire.FrameStdout or wire.FrameStderr
}

func newMonitor(cfg wire.Config) *monitor {
	return &monitor{
		cfg:    cfg,
		log:    newLogWriter(cfg.LogPath, cfg.LogMaxLine),
		stdout: output{fd: -1, stream: "stdout", frame: wire.FrameStdout},
		stderr: output{fd: -1, stream: "stderr", frame: wire.FrameStderr},
		stdin:  -1, attachFD: -1, controlFD: -1, pidFD: -1, epfd: -1, syncFD: -1,
		oom: oomCounter{fd: -1},
	}
}

// Run creates the container and serves it until it exits. It reports the
// outcome of the create on syncFD and returns the process's exit code.
func Run(cfg wire.Config, syncFD int) int {
	tuneRuntime()
	m, err := create(cfg, true, nil)
	if err != nil {
		Report(syncFD, wire.FailedMessage(err.Error()))
		return 1
	}
	m.syncFD = syncFD
	return serveFirst(m)
}

// serveFirst serves the monitor's first container, and the further ones
// that join it when the daemon shares the monitor, until all have exited.
func serveFirst(m *monitor) int {
	p, err := newPool()
	if err == nil && m.cfg.JoinDir != "" {
		// Before the first report: once the daemon knows the monitor, it
		// may send the next container. A monitor that cannot listen
		// serves its one container; the daemon's join finds nobody there.
		p.listenJoin(m.cfg.JoinDir)
	}
	if err == nil {
		err = p.add(m)
	}
	if err != nil {
		m.abandon()
		Report(m.syncFD, wire.FailedMessage(err.Error()))
		return 1
	}
	p.serve()
	return 0
}

// abandon undoes a create that succeeded but cannot be served.
func (m *monitor) abandon() {
	m.deleteContainer()
	for _, name := range []string{wire.AttachSocket, wire.ControlSocket, wire.PIDFile, wire.RuntimeLog} {
		unix.Unlink(m.socketPath(name))
	}
	if m.logMade {
		unix.Unlink(m.cfg.LogPath)
	}
}

// socketPath is a file in the socket directory. A shared monitor works from
// "/", not from any one container's directory; unlink takes paths of any
// length, unlike bind and connect.
func (m *monitor) socketPath(name string) string { return m.cfg.SocketDir + "/" + name }

// tuneRuntime keeps the collector from ever running in the common case. A
// collection is what costs a monitor most: mark bits, work buffers, worker
// goroutines and threads stay resident after the first cycle. Serving
// allocates nothing, and start-up leaves far less than the limit, so no
// cycle runs; the limit still bounds a heap that slow attach clients grew.
// One P: the monitor runs one goroutine, and every further P is a cache
// of its own.
func tuneRuntime() {
	runtime.GOMAXPROCS(1)
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(32 << 20)
}

// Report writes the one message of the sync pipe, or to stderr when there is
// no sync pipe.
func Report(syncFD int, msg []byte) {
	if syncFD < 0 {
		os.Stderr.Write(msg)
		return
	}
	for len(msg) > 0 {
		n, err := unix.Write(syncFD, msg)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return // the daemon is gone; it will find the container from its records
		}
		msg = msg[n:]
	}
}

// SyncFD returns wire.SyncFD when it is the pipe the daemon passed, or -1
// when the monitor was started some other way (by hand). The pipe is made
// close-on-exec: were the runtime and its init to inherit it, the daemon
// would wait for an end of file that comes only with the container's start.
func SyncFD() int {
	var st unix.Stat_t
	if unix.Fstat(wire.SyncFD, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return -1
	}
	unix.CloseOnExec(wire.SyncFD)
	return wire.SyncFD
}

// CloseInheritedFDs closes every descriptor above stdio except keep (-1 for
// none), so the monitor holds nothing of the daemon's, whatever the daemon
// forgot to mark close-on-exec. It must run first thing in main, before
// anything in the process opens a descriptor of its own.
func CloseInheritedFDs(keep int) {
	if keep < 0 {
		unix.CloseRange(3, ^uint(0), 0)
		return
	}
	if keep > 3 {
		unix.CloseRange(3, uint(keep-1), 0)
	}
	unix.CloseRange(uint(keep+1), ^uint(0), 0)
}
