package oci

import (
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
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/minicri/minicri/internal/procstat"
	"github.com/minicri/minicri/internal/tracing"
)

// TerminalSize is a terminal's size in characters.
type TerminalSize struct {
	Width, Height uint16
}

// ExecIO wires an exec's process to its caller.
type ExecIO struct {
	// Stdin, when not nil, is copied to the process. Its end of file closes
	// the process's stdin (without a terminal) or types ^D (with one), so
	// that `cat` ends when its input does. nil gives the process /dev/null.
	Stdin io.Reader
	// Stdout and Stderr receive the output; nil discards it. With a
	// terminal all output goes to Stdout. A writer that blocks holds the
	// process back, never the caller's context.
	Stdout, Stderr io.Writer
	// Resize, with a terminal, carries the client's window size changes.
	Resize <-chan TerminalSize
	// OutputGrace, when not 0, is how long output is still delivered
	// after the exec's process exited. Past it the output pipes are read
	// for what they hold and closed: a child that left the process's
	// session keeps the pipes' write ends open, and the end of file the
	// copies wait for may never come. 0 waits for the end of the output,
	// as containerd does: ExecSync's timeout bounds that wait. It counts
	// from the runtime's exit, which is the process's only under the exec
	// shim (Stream): an attached runtime copies the output itself and waits
	// for its end.
	OutputGrace time.Duration
	// Stream marks an exec whose output is streamed to a client and may be
	// large. It then runs under the runtime's exec shim (Runtime.ExecShim),
	// which saves a copy of every byte (and with a terminal, a pty); a
	// probe's few bytes come back sooner without the shim's own start.
	Stream bool
}

// ExecKillGrace bounds the wait for the runtime to finish once the exec's
// processes were killed; past it the runtime itself is killed.
const ExecKillGrace = 2 * time.Second

// maxExecLog bounds what is kept of the runtime's own log of one exec.
const maxExecLog = 64 << 10

// ExecProcessSpec is the process of an exec: the container's own process
// (environment, user, working directory, capabilities, AppArmor and SELinux
// labels, no_new_privs, rlimits) with the exec's arguments and terminal
// flag. base is not changed and its slices are shared, so that one base
// read per container serves every exec.
func ExecProcessSpec(base *specs.Process, args []string, tty bool) *specs.Process {
	p := *base
	p.Args = args
	p.Terminal = tty
	p.ConsoleSize = nil
	p.CommandLine = ""
	if tty && !slices.ContainsFunc(p.Env, func(e string) bool { return envKey(e) == "TERM" }) {
		// What a user's terminal most likely understands; kubectl does not
		// send its TERM.
		p.Env = append(slices.Clip(p.Env), "TERM=xterm")
	}
	return &p
}

// Exec runs proc in the running container id with `exec --process`, wires
// its stdio to o, and returns its exit code once it ended and its output was
// delivered (after ctx ended, delivery gets ExecKillGrace at most: a writer
// that stopped taking output is left to its caller). stateDir (the
// container's bundle) holds the exec's pid file while it runs; nothing is
// left in it afterwards.
//
// When ctx ends, the process and everything it started in its session are
// killed, the runtime is given ExecKillGrace to finish, and the error wraps
// ctx.Err(), unless the process had already exited by then: a process that
// left a background child holding its output open still reports its own
// exit code, once that child was killed. An error that the runtime reports
// itself (no such container, no such executable) is a *RuntimeError.
func (r *Runtime) Exec(ctx context.Context, id, stateDir string, proc *specs.Process, o ExecIO) (code int, err error) {
	ctx, span := r.span(ctx, "runtime.exec", id)
	defer func() {
		if err == nil && span.IsRecording() {
			span.SetAttributes(tracing.ExitCode.Int(code))
		}
		tracing.End(span, err)
	}()
	if err := ctx.Err(); err != nil {
		return -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	e, err := r.startExec(id, stateDir, proc, o)
	if err != nil {
		return -1, err
	}
	defer e.finish()
	return e.wait(ctx)
}

// execRun is one running `runc exec` and the plumbing around it.
type execRun struct {
	rt      *Runtime
	id      string
	cmd     *exec.Cmd
	pidFile string

	exited   chan struct{}  // closed once the runtime exited
	done     chan struct{}  // closed when Exec returns: stops the helpers
	copies   sync.WaitGroup // output copiers; each closes its read end
	log      bytes.Buffer   // the runtime's --log, complete once logDone is closed
	logDone  chan struct{}
	stdinW   *os.File // our end of the process's stdin pipe, or nil
	stdinEnd sync.Once
	grace    time.Duration // ExecIO.OutputGrace
	cut      chan struct{} // closed at the end of the grace: copies stop
	cutOnce  sync.Once
	outMu    sync.Mutex
	outputs  []*os.File     // our read ends of the output pipes, or the pty master
	console  *consoleSocket // where the runtime sends the pty master, or nil
	closers  []io.Closer    // our copies of the child's ends, closed after start
	ours     []io.Closer    // our own ends, closed if the start fails

	mainAlive bool // when ctx ended: the exec's own process still ran
}

func (r *Runtime) startExec(id, stateDir string, proc *specs.Process, o ExecIO) (_ *execRun, retErr error) {
	bin, err := r.Binary()
	if err != nil {
		return nil, err
	}
	e := &execRun{rt: r, id: id, exited: make(chan struct{}), done: make(chan struct{}), logDone: make(chan struct{}),
		grace: o.OutputGrace, cut: make(chan struct{})}
	defer func() {
		if retErr != nil {
			e.closeChildEnds()
			for _, c := range e.ours {
				c.Close()
			}
			close(e.done)
		}
	}()
	// A streamed exec runs the runtime detached under the exec shim: see
	// execCommand. With a terminal the runtime then hands the daemon the
	// container's pty through a console socket.
	detached := o.Stream && r.ExecShim != ""
	token := randomHex(8)
	var console *consoleSocket
	if detached && proc.Terminal {
		if console, err = listenConsole(stateDir, "exec-"+token+".sock"); err != nil {
			return nil, fmt.Errorf("exec in %s: %w", id, err)
		}
		e.console = console
		e.ours = append(e.ours, console)
		proc = withConsoleSize(proc, o.Resize)
	}
	procR, err := e.processPipe(proc)
	if err != nil {
		return nil, err
	}
	logR, logW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("exec in %s: log pipe: %w", id, err)
	}
	e.closers = append(e.closers, logW)
	e.ours = append(e.ours, logR)
	e.pidFile = filepath.Join(stateDir, "exec-"+token+".pid")
	// The process file and the log are pipes (fds 3 and 4 in the runtime):
	// no file to write, sync or forget in the bundle.
	e.cmd = r.execCommand(bin, e.pidFile, id, detached, console)
	e.cmd.ExtraFiles = []*os.File{procR, logW}
	// A session of its own: no signal meant for the daemon's process group
	// reaches the runtime, and the runtime never gets the daemon's terminal.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var master *os.File
	switch {
	case console != nil:
		// The process gets the container's pty; the runtime's and the
		// shim's own stdio are /dev/null.
	case proc.Terminal:
		master, err = e.terminalStdio(o)
	default:
		err = e.pipeStdio(o)
	}
	if err != nil {
		return nil, err
	}
	if err := e.cmd.Start(); err != nil {
		return nil, r.failure(context.Background(), "exec", id, "", err)
	}
	e.closeChildEnds()
	go func() {
		defer close(e.logDone)
		defer logR.Close()
		_, _ = io.Copy(&e.log, cappedReader(logR, maxExecLog))
	}()
	if console != nil {
		e.receiveTerminal(console, o)
	} else {
		e.startHelpers(o, master)
	}
	go func() {
		_ = e.cmd.Wait()
		close(e.exited)
	}()
	return e, nil
}

// execCommand is the runtime's exec, with the process file and the log on
// pipes (fds 3 and 4 in the runtime): no file to write, sync or forget in
// the bundle. A streamed exec runs detached under the exec shim: attached,
// runc would put pipes of its own between the process and ours, or with a
// terminal a pty of its own, and copy every byte of output once more.
// Detached with a terminal, runc sends the container's pty master to the
// console socket.
func (r *Runtime) execCommand(bin, pidFile, id string, detached bool, console *consoleSocket) *exec.Cmd {
	args := append(r.globalArgs("/proc/self/fd/4"), "exec")
	var cmd *exec.Cmd
	if !detached {
		args = append(args, "--process", "/proc/self/fd/3", "--pid-file", pidFile, id)
		cmd = exec.Command(bin, args...)
	} else {
		args = append(args, "--detach", "--process", "/proc/self/fd/3", "--pid-file", pidFile)
		if console != nil {
			args = append(args, "--console-socket", console.dial)
		}
		args = append(args, id)
		cmd = exec.Command(r.ExecShim, append([]string{"exec", bin}, args...)...)
	}
	cmd.Env = runtimeEnv()
	return cmd
}

// processPipe returns the read end of a pipe that holds the whole process
// JSON, written before the runtime starts.
func (e *execRun) processPipe(proc *specs.Process) (*os.File, error) {
	data, err := json.Marshal(proc)
	if err != nil {
		return nil, fmt.Errorf("exec in %s: encode process: %w", e.id, err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("exec in %s: process pipe: %w", e.id, err)
	}
	e.closers = append(e.closers, r)
	defer w.Close()
	if len(data) > 60<<10 {
		// The default 64 KiB would make the write below wait for a reader.
		if _, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, len(data)+4096); err != nil {
			return nil, fmt.Errorf("exec in %s: process of %d bytes does not fit a pipe: %w", e.id, len(data), err)
		}
	}
	if _, err := w.Write(data); err != nil {
		return nil, fmt.Errorf("exec in %s: write process: %w", e.id, err)
	}
	return r, nil
}

// pipeStdio gives the runtime pipes (or the caller's files) as stdio, so
// that the end of the caller's stdin really closes the process's stdin.
func (e *execRun) pipeStdio(o ExecIO) error {
	if o.Stdin != nil {
		if f, ok := o.Stdin.(*os.File); ok {
			e.cmd.Stdin = f
		} else {
			r, w, err := os.Pipe()
			if err != nil {
				return fmt.Errorf("exec in %s: stdin pipe: %w", e.id, err)
			}
			e.cmd.Stdin, e.stdinW = r, w
			e.closers = append(e.closers, r)
			e.ours = append(e.ours, w)
			// Room for a client's upload (kubectl cp) to go on while the
			// process reads: a full pipe parks the copy until it drains.
			_, _ = unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, outputPipeSize)
		}
	}
	for _, s := range []struct {
		dst   *io.Writer
		w     io.Writer
		label string
	}{{&e.cmd.Stdout, o.Stdout, "stdout"}, {&e.cmd.Stderr, o.Stderr, "stderr"}} {
		if s.w == nil {
			continue
		}
		if f, ok := s.w.(*os.File); ok {
			*s.dst = f
			continue
		}
		r, w, err := outputPipe()
		if err != nil {
			return fmt.Errorf("exec in %s: %s pipe: %w", e.id, s.label, err)
		}
		*s.dst = w
		e.closers = append(e.closers, w)
		// Room for the runtime to go on writing while a batch is sent.
		_, _ = unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, outputPipeSize)
		e.addOutput(r)
		e.copyBatched(s.w, r, false)
	}
	return nil
}

// Output is copied in batches when it comes in bulk: a read of at least
// bulkRead bytes makes the copy read on for up to batchWait, until it holds
// batchSize bytes, so that a stream client gets fewer, larger frames. Less
// output than that (a prompt, a line, a probe's answer) goes out at once,
// from a small buffer: the batch buffer is only made for bulk.
//
// Within a batch the copy does not wait on the pipe: a pipe has no
// low-water mark (SO_RCVLOWAT is for sockets), and a reader that waits
// for it is woken by every write of the process, a few KiB each (busybox
// writes 4 KiB). It takes what the pipe holds and, when that did not fill
// the batch, lets the process fill the pipe until batchWait passed, then
// takes what it holds: a producer faster than the copy always finds a
// full pipe and never waits, a slower one waits at most batchWait.
//
// Nor is the pipe in the poller (epoll) while the copy does not wait on
// it: the kernel wakes a polled pipe's pollers on every write, not only
// when it was empty, and every idle thread of the daemon's runtime sleeps
// in the poller, so each 4 KiB the process wrote would wake one, even
// while the copy sleeps or sends. The read end is a descriptor outside
// the poller, and only a wait for output puts a duplicate of it in the
// poller, for that wait.
const (
	outputPipeSize = 1 << 20
	bulkRead       = 4 << 10
	smallBuffer    = 32 << 10
	batchSize      = 256 << 10
	batchWait      = 2 * time.Millisecond
)

// outputPipe makes an output pipe whose read end is non-blocking and
// outside the poller (see above): os.NewFile puts a descriptor in the
// poller only when it is non-blocking already.
func outputPipe() (r, w *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, err
	}
	r, w = os.NewFile(uintptr(fds[0]), "|0"), os.NewFile(uintptr(fds[1]), "|1")
	if err := unix.SetNonblock(fds[0], true); err != nil {
		r.Close()
		w.Close()
		return nil, nil, err
	}
	return r, w, nil
}

// A pty is read otherwise: a read of its master stops at the end of its
// line discipline's buffer (4 KiB), however much the process wrote behind
// it, so its output would go out in frames of 4 KiB. The copy takes what
// the pty holds now, read after read, but never waits for more: a pty
// holds little (64 KiB), and a copy that slept would let the process
// block on a full pty.

// copyBatched copies a pipe, or a pty master (terminal), to dst until it
// ends, or until the output is cut (cutOutput) and what it held then was
// copied; then it closes it.
func (e *execRun) copyBatched(dst io.Writer, src *os.File, terminal bool) {
	e.copies.Add(1)
	go func() {
		defer e.copies.Done()
		defer src.Close()
		buf := make([]byte, smallBuffer)
		rc, err := src.SyscallConn()
		if err != nil {
			return
		}
		for {
			// cutOutput closes cut before it sets the deadline that ends a
			// blocked read, so a read that starts after this check fails.
			select {
			case <-e.cut:
				copyRest(dst, src, buf)
				return
			default:
			}
			var n int
			if terminal {
				n, err = src.Read(buf)
			} else if n, err = readHeld(rc, buf); n == 0 && err == nil {
				n, err = e.waitOutput(rc, buf)
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue // cutOutput's deadline
			}
			switch {
			case err != nil:
			case terminal:
				n, err = readHeldAll(rc, buf, n)
			case n >= bulkRead:
				if len(buf) < batchSize {
					buf = append(buf[:n], make([]byte, batchSize-n)...)
				}
				n, err = readBatch(rc, buf, n)
			}
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue // cutOutput's deadline, within a batch
			}
			if err != nil {
				return
			}
		}
	}()
}

// waitOutput waits in the poller for the output pipe behind rc to hold
// output and reads it. Only a duplicate of its descriptor is in the poller,
// and only for the wait; cutOutput ends the wait as it ends a read.
func (e *execRun) waitOutput(rc syscall.RawConn, buf []byte) (int, error) {
	dup := -1
	var err error
	if cerr := rc.Control(func(fd uintptr) { dup, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); cerr != nil {
		return 0, cerr
	}
	if err != nil {
		return 0, err
	}
	// Non-blocking (the flag is the pipe's, shared with the duplicate): in
	// the poller.
	w := os.NewFile(uintptr(dup), "|0")
	defer w.Close()
	if !e.addOutput(w) {
		return 0, os.ErrDeadlineExceeded
	}
	defer e.removeOutput(w)
	return w.Read(buf)
}

// copyRest copies what a pipe holds now, and no more: a writer that goes on
// writing must not keep the copy going.
func copyRest(dst io.Writer, src *os.File, buf []byte) {
	rc, err := src.SyscallConn()
	if err != nil {
		return
	}
	left := 0
	// TIOCINQ is FIONREAD: the bytes a pipe holds.
	_ = rc.Control(func(fd uintptr) { left, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) })
	for left > 0 {
		n := 0
		// Control, not Read: the read deadline that ended the copy's wait
		// has passed, and Read would refuse.
		_ = rc.Control(func(fd uintptr) { n, _ = unix.Read(int(fd), buf[:min(len(buf), left)]) })
		if n <= 0 {
			return
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
		left -= n
	}
}

// cutOutput ends the output copies once the exec's process exited and its
// grace passed: each copies what its pipe holds and closes it, whoever
// still holds the write end.
func (e *execRun) cutOutput() {
	e.cutOnce.Do(func() {
		close(e.cut)
		e.outMu.Lock()
		defer e.outMu.Unlock()
		for _, r := range e.outputs {
			_ = r.SetReadDeadline(time.Now())
		}
	})
}

// removeOutput forgets an output that waitOutput added.
func (e *execRun) removeOutput(r *os.File) {
	e.outMu.Lock()
	defer e.outMu.Unlock()
	e.outputs = slices.DeleteFunc(e.outputs, func(o *os.File) bool { return o == r })
}

// addOutput registers an output for cutOutput; false when the output was
// cut already (a pty master that came after the cut, or a wait for output
// that starts after it).
func (e *execRun) addOutput(r *os.File) bool {
	e.outMu.Lock()
	defer e.outMu.Unlock()
	select {
	case <-e.cut:
		return false
	default:
	}
	e.outputs = append(e.outputs, r)
	return true
}

// readBatch reads on into buf[n:] until it is full or batchWait passed,
// taking what the pipe holds rather than waiting on it: what it holds now,
// and if that did not fill buf, what it holds once batchWait passed.
func readBatch(rc syscall.RawConn, buf []byte, n int) (int, error) {
	deadline := time.Now().Add(batchWait)
	for n < len(buf) {
		m, err := readHeld(rc, buf[n:])
		n += m
		if err != nil {
			return n, err
		}
		left := time.Until(deadline)
		if n == len(buf) || left <= 0 {
			break
		}
		time.Sleep(left)
	}
	return n, nil
}

// readHeldAll reads on into buf[n:] what rc's pty holds now, read after read,
// until buf is full or src holds nothing more.
func readHeldAll(rc syscall.RawConn, buf []byte, n int) (int, error) {
	for n < len(buf) {
		m, err := readHeld(rc, buf[n:])
		n += m
		if m == 0 || err != nil {
			return n, err
		}
	}
	return n, nil
}

// readHeld reads what the pipe holds now, without waiting for more: 0 and
// no error when it is empty, io.EOF once every writer closed it.
func readHeld(rc syscall.RawConn, p []byte) (int, error) {
	var n int
	var rerr error
	// A func that returns true never parks on the poller: one read.
	err := rc.Read(func(fd uintptr) bool {
		n, rerr = unix.Read(int(fd), p)
		return true
	})
	switch {
	case err != nil:
		return 0, err
	case errors.Is(rerr, unix.EAGAIN) || errors.Is(rerr, unix.EINTR):
		return 0, nil
	case rerr != nil:
		return 0, rerr
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// withConsoleSize is proc with the client's terminal size, when it sent one
// already, as the size the runtime gives the container's pty: the process
// sees it from its first look.
func withConsoleSize(proc *specs.Process, resize <-chan TerminalSize) *specs.Process {
	select {
	case size, ok := <-resize:
		if ok {
			p := *proc
			p.ConsoleSize = &specs.Box{Height: uint(size.Height), Width: uint(size.Width)}
			return &p
		}
	default:
	}
	return proc
}

// terminalStdio gives the runtime the slave of a pty of ours as its
// terminal: runc, not detached, relays between it and the container's own
// pty and copies the window size across on SIGWINCH.
func (e *execRun) terminalStdio(o ExecIO) (*os.File, error) {
	master, slave, err := openPty()
	if err != nil {
		return nil, fmt.Errorf("exec in %s: %w", e.id, err)
	}
	e.closers = append(e.closers, slave)
	e.ours = append(e.ours, master)
	// Raw from the start: the container's pty does the line discipline, ours
	// must pass every byte as it is (runc would set it raw, but later).
	if _, err := term.MakeRaw(int(slave.Fd())); err != nil {
		return nil, fmt.Errorf("exec in %s: set the terminal raw: %w", e.id, err)
	}
	select {
	case size, ok := <-o.Resize:
		if ok {
			_ = setWinsize(master, size)
		}
	default:
	}
	e.cmd.Stdin, e.cmd.Stdout, e.cmd.Stderr = slave, slave, slave
	return master, nil
}

// startHelpers starts what runs beside the runtime: stdin and output
// copies of a terminal, and its resizes. None outlives the exec but a
// stdin copy blocked in its reader, which ends with the caller's stream.
func (e *execRun) startHelpers(o ExecIO, master *os.File) {
	if e.stdinW != nil {
		go func() {
			_, _ = io.Copy(e.stdinW, o.Stdin)
			e.closeStdin()
		}()
	}
	if master != nil {
		e.wireTerminal(o, master, true)
	}
}

// wireTerminal wires a pty master to the caller: its output to Stdout, Stdin
// into it, the resizes onto it. viaRuntime: the pty is ours and the runtime
// relays it to the container's.
func (e *execRun) wireTerminal(o ExecIO, master *os.File, viaRuntime bool) {
	if o.Stdout != nil {
		e.copyBatched(o.Stdout, master, true)
	} else {
		e.copyBatched(io.Discard, master, true)
	}
	if o.Stdin != nil {
		go func() {
			_, err := io.Copy(master, o.Stdin)
			if err == nil {
				// End of input on a terminal is ^D, which the container's
				// pty turns into an end of file for the reader.
				_, _ = master.Write([]byte{4})
			}
		}()
	}
	if o.Resize != nil {
		go e.forwardResizes(master, o.Resize, viaRuntime)
	}
}

// receiveTerminal waits, beside the runtime, for the container's pty master
// from the console socket and then wires it as startHelpers wires a pty of
// ours. It counts as an output copy: the exec's output is delivered once
// the master's copy ended, or at once when the runtime exited without
// sending one.
func (e *execRun) receiveTerminal(c *consoleSocket, o ExecIO) {
	e.copies.Add(1)
	go func() {
		defer e.copies.Done()
		master, err := c.receive(e.exited)
		c.Close()
		if err != nil {
			return // the runtime exits 255 and its log says why
		}
		if !e.addOutput(master) {
			master.Close()
			return
		}
		e.wireTerminal(o, master, false)
	}()
}

func (e *execRun) forwardResizes(master *os.File, resize <-chan TerminalSize, signalRuntime bool) {
	for {
		select {
		case <-e.done:
			return
		case size, ok := <-resize:
			if !ok {
				return
			}
			if err := setWinsize(master, size); err != nil || !signalRuntime {
				// The container's own pty: the kernel sends its foreground
				// process group SIGWINCH.
				continue
			}
			// runc copies our pty's size onto the container's on SIGWINCH.
			_ = e.cmd.Process.Signal(unix.SIGWINCH)
		}
	}
}

func (e *execRun) closeChildEnds() {
	for _, c := range e.closers {
		c.Close()
	}
	e.closers = nil
}

func (e *execRun) closeStdin() {
	e.stdinEnd.Do(func() {
		if e.stdinW != nil {
			e.stdinW.Close()
		}
	})
}

// wait waits for the runtime, or for ctx and then for the runtime to be
// made to end, and then for the output to be delivered.
func (e *execRun) wait(ctx context.Context) (int, error) {
	select {
	case <-e.exited:
	case <-ctx.Done():
		e.terminate()
	}
	e.closeStdin()
	// The runtime is gone, so the copies end as soon as their writers took
	// the rest of the output. A writer may be a client that stopped reading:
	// once ctx ended, it gets ExecKillGrace, and its copy ends when it
	// closes its stream.
	delivered := make(chan struct{})
	go func() {
		e.copies.Wait()
		close(delivered)
	}()
	var graceOver <-chan time.Time
	// The pty master of a console socket is an output too, once it came.
	e.outMu.Lock()
	outputs := len(e.outputs)
	e.outMu.Unlock()
	if e.grace > 0 && (e.console != nil || outputs > 0) {
		timer := time.NewTimer(e.grace)
		defer timer.Stop()
		graceOver = timer.C
	}
	select {
	case <-delivered:
	case <-graceOver:
		// A child that left the process's session holds the output open:
		// what the pipes hold is delivered, then they are closed.
		e.cutOutput()
		select {
		case <-delivered:
		case <-ctx.Done():
			e.giveUp(delivered)
		}
	case <-ctx.Done():
		e.giveUp(delivered)
	}
	return e.result(ctx)
}

// giveUp ends the delivery of an exec whose caller is gone (ctx ended).
// Under the exec shim the runtime is gone once the process is, so a
// background child that holds the output open is still there: it goes the
// way terminate sends it with an attached runtime. A child in a session of
// its own survives that, so the output is then cut: no copy is left reading
// a pipe that child holds. A copy blocked writing to a caller that stopped
// reading ends when the caller closes its stream.
func (e *execRun) giveUp(delivered <-chan struct{}) {
	if pid := e.execPID(); pid > 0 {
		killSession(pid)
	}
	timer := time.NewTimer(ExecKillGrace)
	defer timer.Stop()
	select {
	case <-delivered:
	case <-timer.C:
		e.cutOutput()
	}
}

func (e *execRun) result(ctx context.Context) (int, error) {
	if ctx.Err() != nil && e.mainAlive {
		return -1, fmt.Errorf("exec in %s: %w", e.id, ctx.Err())
	}
	code := e.cmd.ProcessState.ExitCode()
	if code < 0 {
		err := fmt.Errorf("exec in %s: %s %v", e.id, e.rt.name(), e.cmd.ProcessState)
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", err, ctx.Err())
		}
		return -1, err
	}
	// runc exits 255 when it could not run the process at all, and says why
	// in its log; a process that exits 255 leaves no error there. The
	// runtime was the log's only writer, so its end is near.
	if code == 255 {
		<-e.logDone
		if msg := lastLogError(e.log.Bytes()); msg != "" {
			return -1, e.rt.failure(ctx, "exec", e.id, msg, errors.New("exit status 255"))
		}
	}
	return code, nil
}

// terminate kills the exec's process and its session, lets the runtime
// finish (it reports the process's exit), and kills the runtime if it does
// not within ExecKillGrace.
func (e *execRun) terminate() {
	pid := e.execPID()
	if pid > 0 {
		e.mainAlive = procstat.Live(pid)
		killSession(pid)
	} else {
		select {
		case <-e.exited:
		default:
			e.mainAlive = true
		}
	}
	timer := time.NewTimer(ExecKillGrace)
	defer timer.Stop()
	select {
	case <-e.exited:
		return
	case <-timer.C:
	}
	_ = e.cmd.Process.Kill()
	<-e.exited
}

// execPID reads the pid file. The runtime writes it right after starting the
// process; until then the process may be starting, so a missing file is
// waited for while the runtime runs (rare: only a cancel during start-up).
func (e *execRun) execPID() int {
	deadline := time.Now().Add(ExecKillGrace)
	for {
		if pid, err := readPidFile(e.pidFile); err == nil {
			return pid
		}
		select {
		case <-e.exited:
			return 0
		default:
		}
		if time.Now().After(deadline) {
			return 0
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *execRun) finish() {
	close(e.done)
	if e.console != nil {
		e.console.Close()
	}
	os.Remove(e.pidFile)
	// runc writes the pid file as .NAME then renames it.
	os.Remove(filepath.Join(filepath.Dir(e.pidFile), "."+filepath.Base(e.pidFile)))
}

// killSession kills pid's process group and every other process of its
// session: runc makes the exec's process a session leader, so that is all it
// started, background jobs of an interactive shell included. A process that
// started a session of its own escaped on purpose and is left alone.
func killSession(pid int) {
	_ = unix.Kill(-pid, unix.SIGKILL)
	_ = unix.Kill(pid, unix.SIGKILL)
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		other, err := procstat.Parse(data)
		if err == nil && other.Session == pid && other.PID != pid {
			_ = unix.Kill(other.PID, unix.SIGKILL)
		}
	}
}

// openPty opens a pty pair. The master is made non-blocking again (pty.Open
// leaves it blocking), so that reads wait in the poller and not on a thread.
func openPty() (master, slave *os.File, err error) {
	m, slave, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open pty: %w", err)
	}
	defer m.Close()
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		slave.Close()
		return nil, nil, fmt.Errorf("open pty: %w", err)
	}
	return os.NewFile(uintptr(fd), m.Name()), slave, nil
}

// setWinsize sets a pty's window size without making it blocking.
func setWinsize(f *os.File, size TerminalSize) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	ws := &unix.Winsize{Row: size.Height, Col: size.Width}
	var ioErr error
	if err := rc.Control(func(fd uintptr) { ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws) }); err != nil {
		return err
	}
	return ioErr
}

// cappedReader reads at most n bytes of r, then discards the rest, so that
// the writer never blocks on a full pipe and nothing grows without bound.
func cappedReader(r io.Reader, n int64) io.Reader {
	return io.MultiReader(io.LimitReader(r, n), discardAll{r})
}

type discardAll struct{ r io.Reader }

func (d discardAll) Read(p []byte) (int, error) {
	for {
		if _, err := d.r.Read(p); err != nil {
			return 0, err
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
