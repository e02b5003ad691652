package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/minicri/minicri/internal/procstat"
)

func TestExecProcessSpec(t *testing.T) {
	base := &specs.Process{
		Args:            []string{"/bin/app"},
		Env:             []string{"PATH=/bin", "A=1"},
		Cwd:             "/work",
		User:            specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{5}},
		NoNewPrivileges: true,
		ApparmorProfile: "prof",
		SelinuxLabel:    "label",
		Capabilities:    &specs.LinuxCapabilities{Bounding: []string{"CAP_CHOWN"}},
		Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 10, Soft: 10}},
		Terminal:        true,
		ConsoleSize:     &specs.Box{Height: 1, Width: 2},
	}
	tests := []struct {
		name    string
		tty     bool
		env     []string
		wantEnv []string
	}{
		{"no tty keeps the env", false, nil, []string{"PATH=/bin", "A=1"}},
		{"tty adds TERM", true, nil, []string{"PATH=/bin", "A=1", "TERM=xterm"}},
		{"tty keeps the container's TERM", true, []string{"TERM=vt100"}, []string{"TERM=vt100"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := *base
			if tt.env != nil {
				b.Env = tt.env
			}
			envBefore := strings.Join(b.Env, ",")
			p := ExecProcessSpec(&b, []string{"sh", "-c", "x"}, tt.tty)
			if got := strings.Join(p.Env, ","); got != strings.Join(tt.wantEnv, ",") {
				t.Errorf("env = %s, want %s", got, strings.Join(tt.wantEnv, ","))
			}
			if got := strings.Join(b.Env, ","); got != envBefore {
				t.Errorf("base env changed to %s", got)
			}
			if p.Terminal != tt.tty || p.ConsoleSize != nil || strings.Join(p.Args, " ") != "sh -c x" {
				t.Errorf("terminal %v console %v args %v", p.Terminal, p.ConsoleSize, p.Args)
			}
			if p.Cwd != "/work" || p.User.UID != 1000 || !p.NoNewPrivileges || p.ApparmorProfile != "prof" ||
				p.SelinuxLabel != "label" || p.Capabilities != base.Capabilities || len(p.Rlimits) != 1 {
				t.Errorf("the container's identity and limits were not kept: %+v", p)
			}
		})
	}
}

// execContainer starts a long-running container and returns its runtime,
// id, bundle and process base.
func execContainer(t *testing.T) (*Runtime, string, string, *specs.Process) {
	t.Helper()
	rt := testRuntime(t, "runc")
	c := baseSpec(t, "/bin/sleep", "600")
	tc := createContainer(t, rt, c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := rt.Start(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	spec, err := ReadSpec(tc.bundle)
	if err != nil {
		t.Fatal(err)
	}
	return rt, c.ID, tc.bundle, spec.Process
}

func TestExecStdio(t *testing.T) {
	forExecModes(t, testExecStdio)
}

func testExecStdio(t *testing.T, stream bool) {
	rt, id, bundle, base := execContainer(t)
	rt.ExecShim = execShim
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("exit code and separate streams", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		code, err := rt.Exec(ctx, id, bundle, ExecProcessSpec(base, []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, false),
			ExecIO{Stream: stream, Stdout: &stdout, Stderr: &stderr})
		if err != nil || code != 3 {
			t.Fatalf("exit %d, %v; want 3", code, err)
		}
		if stdout.String() != "out\n" || stderr.String() != "err\n" {
			t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
		}
	})
	t.Run("end of stdin ends cat", func(t *testing.T) {
		var stdout bytes.Buffer
		code, err := rt.Exec(ctx, id, bundle, ExecProcessSpec(base, []string{"cat"}, false),
			ExecIO{Stream: stream, Stdin: strings.NewReader("piped\n"), Stdout: &stdout})
		if err != nil || code != 0 || stdout.String() != "piped\n" {
			t.Errorf("exit %d, %v, output %q", code, err, stdout.String())
		}
	})
	t.Run("terminal", func(t *testing.T) {
		var stdout bytes.Buffer
		in, inW := io.Pipe()
		go func() {
			inW.Write([]byte("echo typed\n"))
			time.Sleep(100 * time.Millisecond)
			inW.Close()
		}()
		code, err := rt.Exec(ctx, id, bundle, ExecProcessSpec(base, []string{"sh", "-c", "test -t 0 && echo is-a-tty; read line; echo got:$line"}, true),
			ExecIO{Stream: stream, Stdin: in, Stdout: &stdout})
		if err != nil || code != 0 {
			t.Fatalf("exit %d, %v", code, err)
		}
		if out := stdout.String(); !strings.Contains(out, "is-a-tty") || !strings.Contains(out, "got:echo typed") {
			t.Errorf("terminal output %q", out)
		}
	})
	t.Run("unknown executable is the runtime's error", func(t *testing.T) {
		_, err := rt.Exec(ctx, id, bundle, ExecProcessSpec(base, []string{"/no/such/binary"}, false), ExecIO{Stream: stream})
		var rerr *RuntimeError
		if !errors.As(err, &rerr) || !strings.Contains(err.Error(), "no/such/binary") {
			t.Errorf("err = %v, want a RuntimeError naming the binary", err)
		}
	})
	t.Run("unknown container", func(t *testing.T) {
		_, err := rt.Exec(ctx, "no-such-container", bundle, ExecProcessSpec(base, []string{"true"}, false), ExecIO{Stream: stream})
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("err = %v, want ErrNotFound", err)
		}
	})
	assertNoExecFiles(t, bundle)
}

func TestExecDeadline(t *testing.T) {
	forExecModes(t, testExecDeadline)
}

func testExecDeadline(t *testing.T, stream bool) {
	rt, id, bundle, base := execContainer(t)
	rt.ExecShim = execShim
	ctx := context.Background()

	t.Run("kills the process and its children", func(t *testing.T) {
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		var out bytes.Buffer
		_, err := rt.Exec(short, id, bundle, ExecProcessSpec(base, []string{"sh", "-c", "sleep 100 & echo started; sleep 100"}, false), ExecIO{Stream: stream, Stdout: &out})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("a 500ms exec returned after %s", took)
		}
		assertNoSleepIn(t, rt, id)
	})
	t.Run("a background child holding stdout does not hide the exit code", func(t *testing.T) {
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		var out bytes.Buffer
		code, err := rt.Exec(short, id, bundle, ExecProcessSpec(base, []string{"sh", "-c", "sleep 300 & echo ok"}, false), ExecIO{Stream: stream, Stdout: &out})
		if err != nil || code != 0 || out.String() != "ok\n" {
			t.Errorf("exit %d, %v, output %q; want 0 and ok", code, err, out.String())
		}
		assertNoSleepIn(t, rt, id)
	})
	assertNoExecFiles(t, bundle)
}

// forExecModes runs an exec test with runc attached, and with runc
// detached under the exec shim, as a streaming exec runs.
func forExecModes(t *testing.T, test func(t *testing.T, stream bool)) {
	t.Run("attached", func(t *testing.T) { test(t, false) })
	t.Run("shim", func(t *testing.T) {
		if execShim == "" {
			t.Skip("minicri-conmon was not built")
		}
		test(t, true)
	})
}

// assertNoSleepIn fails when a sleep other than the container's init still
// runs in the container's pid namespace.
func assertNoSleepIn(t *testing.T, rt *Runtime, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := rt.State(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	initNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", st.Pid))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := sleepersIn(initNS, st.Pid)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleep processes %v still run in the container", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sleepersIn(pidNS string, initPID int) []int {
	var left []int
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == initPID || !procstat.Live(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(p + "/cmdline")
		ns, _ := os.Readlink(p + "/ns/pid")
		if ns == pidNS && strings.Contains(string(cmdline), "sleep") {
			left = append(left, pid)
		}
	}
	return left
}

func assertNoExecFiles(t *testing.T, bundle string) {
	t.Helper()
	entries, _ := os.ReadDir(bundle)
	for _, e := range entries {
		if strings.Contains(e.Name(), "exec-") {
			t.Errorf("exec left %s in the bundle", e.Name())
		}
	}
}

// slowWriter takes its time with every write: a client reading slowly.
type slowWriter struct {
	mu sync.Mutex
	n  int
}

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(20 * time.Millisecond)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n += len(p)
	return len(p), nil
}

// TestExecOutputGrace: a child that left the exec's session holds the
// output open; with OutputGrace the exec still ends shortly after its own
// process, with all that process wrote delivered, though the slow writer
// still had a pipe full to take when the grace ended. Only under the exec
// shim: an attached runc copies the output itself and waits for its end.
func TestExecOutputGrace(t *testing.T) {
	if execShim == "" {
		t.Skip("minicri-conmon was not built")
	}
	const stream = true
	rt, id, bundle, base := execContainer(t)
	rt.ExecShim = execShim
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const size = 3 << 20
	var out slowWriter
	start := time.Now()
	code, err := rt.Exec(ctx, id, bundle, ExecProcessSpec(base, []string{"sh", "-c", "setsid sleep 301 & head -c " + strconv.Itoa(size) + " /dev/zero"}, false),
		ExecIO{Stream: stream, Stdout: &out, Stderr: io.Discard, OutputGrace: 100 * time.Millisecond})
	took := time.Since(start)
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v; want 0", code, err)
	}
	if out.n != size {
		t.Errorf("delivered %d bytes, want %d: the cut lost output the process wrote", out.n, size)
	}
	if took > 10*time.Second {
		t.Errorf("the exec returned after %s: it waited for the background child", took)
	}
	assertNoExecFiles(t, bundle)
}

// TestExecTerminalIsRawFromTheStart: the pty given to the runtime passes
// every byte as it is (the container's own pty does the line discipline):
// no echo, no line editing, no output processing, no signals from ^C.
func TestExecTerminalIsRawFromTheStart(t *testing.T) {
	e := &execRun{id: "raw", cmd: &exec.Cmd{}}
	if _, err := e.terminalStdio(ExecIO{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range append(e.closers, e.ours...) {
			c.Close()
		}
	})
	tio, err := unix.IoctlGetTermios(int(e.closers[0].(*os.File).Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if tio.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG|unix.IEXTEN) != 0 || tio.Oflag&unix.OPOST != 0 || tio.Iflag&(unix.ICRNL|unix.IXON) != 0 || tio.Cflag&unix.CSIZE != unix.CS8 {
		t.Errorf("terminal modes lflag %#o oflag %#o iflag %#o cflag %#o, want raw", tio.Lflag, tio.Oflag, tio.Iflag, tio.Cflag)
	}
}

// TestExecTerminalHasNoRuntimeRelay: a streamed exec with a terminal reads
// the container's own pty (runc's console socket), so while its process
// runs no runtime is left copying between that pty and one of ours: only
// the shim waits.
func TestExecTerminalHasNoRuntimeRelay(t *testing.T) {
	if execShim == "" {
		t.Skip("minicri-conmon was not built")
	}
	rt, id, bundle, base := execContainer(t)
	rt.ExecShim = execShim
	bin, err := rt.Binary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in, typing := io.Pipe()
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		_, err := rt.Exec(ctx, id, bundle, ExecProcessSpec(base, []string{"sh", "-c", "echo ready; read line; echo got:$line"}, true),
			ExecIO{Stream: true, Stdin: in, Stdout: out})
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "ready") {
		if time.Now().After(deadline) {
			t.Fatalf("no ready from the exec after 10 s: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A detached runtime may still be on its way out when the process
	// speaks; an attached one stays while the process waits for input.
	runtimeLeft := func() string {
		procs, _ := filepath.Glob("/proc/[0-9]*")
		for _, p := range procs {
			exe, _ := os.Readlink(p + "/exe")
			cmdline, _ := os.ReadFile(p + "/cmdline")
			if exe == bin && strings.Contains(string(cmdline), bundle) {
				return strings.ReplaceAll(string(cmdline), "\x00", " ")
			}
		}
		return ""
	}
	deadline = time.Now().Add(5 * time.Second)
	for left := runtimeLeft(); left != ""; left = runtimeLeft() {
		if time.Now().After(deadline) {
			t.Errorf("the runtime still runs beside the terminal exec after 5 s: %q", left)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	io.WriteString(typing, "typed\n")
	typing.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "got:typed") {
		t.Errorf("output %q, want got:typed", out.String())
	}
}

// syncBuffer is a bytes.Buffer that the exec's copy writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTerminalCopyTakesWhatThePtyHolds: a read of a pty master stops at its
// line discipline's 4 KiB whatever waits behind it; the copy of a terminal
// reads on while the pty holds output, so a client gets it in one frame,
// not in frames of 4 KiB, and nothing is lost or reordered.
func TestTerminalCopyTakesWhatThePtyHolds(t *testing.T) {
	master, slave, err := openPty()
	if err != nil {
		t.Fatal(err)
	}
	defer slave.Close()
	if _, err := term.MakeRaw(int(slave.Fd())); err != nil {
		t.Fatal(err)
	}
	const size = 8 << 10 // two reads and more, within what a pty holds
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i % 251)
	}
	// The process wrote all of it before the copy looks.
	wrote := make(chan error, 1)
	go func() {
		_, err := slave.Write(want)
		wrote <- err
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a pty of this kernel does not hold %d bytes", size)
	}
	e := &execRun{cut: make(chan struct{})}
	out := &frameRecorder{}
	e.copyBatched(out, master, true)
	deadline := time.Now().Add(10 * time.Second)
	for out.len() < size && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	slave.Close() // the copy ends with the pty's EIO
	e.copies.Wait()
	got, frames := out.result()
	if !bytes.Equal(got, want) {
		t.Fatalf("delivered %d bytes, want the %d written, in order", len(got), size)
	}
	if frames[0] != size {
		t.Errorf("frames %v: the first took %d bytes of the %d the pty held", frames, frames[0], size)
	}
}

// frameRecorder keeps what a copy wrote and the size of each write.
type frameRecorder struct {
	mu     sync.Mutex
	b      bytes.Buffer
	frames []int
}

func (f *frameRecorder) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frames = append(f.frames, len(p))
	return f.b.Write(p)
}

func (f *frameRecorder) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.b.Len()
}

func (f *frameRecorder) result() ([]byte, []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return bytes.Clone(f.b.Bytes()), slices.Clone(f.frames)
}

// TestOutputPipeStaysOutOfThePoller: the kernel wakes a polled pipe's
// pollers on every write, not only when it was empty, so the read end of
// an output pipe is in the poller (epoll) only while the copy waits for
// output, never while it sends what it read and the process writes on;
// and the output arrives whole, in order, with its end.
func TestOutputPipeStaysOutOfThePoller(t *testing.T) {
	r, w, err := outputPipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, outputPipeSize); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 2*batchSize)
	for i := range want {
		want[i] = byte(i % 251)
	}
	if _, err := w.Write(want); err != nil { // the process wrote ahead
		t.Fatal(err)
	}
	e := &execRun{cut: make(chan struct{})}
	out := &gatedWriter{entered: make(chan struct{}), open: make(chan struct{})}
	e.copyBatched(out, r, false)
	select {
	case <-out.entered: // the copy sends its first batch; the pipe holds the rest
	case <-time.After(10 * time.Second):
		t.Fatal("the copy sent nothing in 10 s")
	}
	polled := polledPipes(t)[pipeInode(t, r)]
	close(out.open)
	w.Close()
	e.copies.Wait()
	if polled {
		t.Error("the output pipe is in the poller while the copy sends and the pipe holds output")
	}
	if got := out.rec.b.Bytes(); !bytes.Equal(got, want) {
		t.Fatalf("delivered %d bytes, want the %d written, in order", len(got), len(want))
	}
}

// gatedWriter holds the copy's first write until open is closed.
type gatedWriter struct {
	entered, open chan struct{}
	once          sync.Once
	rec           frameRecorder
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	g.once.Do(func() { close(g.entered) })
	<-g.open
	return g.rec.Write(p)
}

// pipeInode is the inode of the pipe behind f.
func pipeInode(t *testing.T, f *os.File) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// polledPipes are the inodes of the pipes in this process's epoll sets
// that the kernel would wake on a write: those with a descriptor open.
func polledPipes(t *testing.T) map[uint64]bool {
	t.Helper()
	polled := map[uint64]bool{}
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if link, _ := os.Readlink("/proc/self/fd/" + fd.Name()); link != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + fd.Name())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			// tfd: N events: … data: … pos:0 ino:HEX sdev:…
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != "tfd:" {
				continue
			}
			for _, kv := range f {
				if ino, ok := strings.CutPrefix(kv, "ino:"); ok {
					n, _ := strconv.ParseUint(ino, 16, 64)
					polled[n] = true
				}
			}
		}
	}
	return polled
}
