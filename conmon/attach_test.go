package conmon_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/minicri/minicri/conmon"
)

// syncBuffer is a bytes.Buffer that Attach can write while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) contains(s string) func() bool {
	return func() bool { return strings.Contains(b.String(), s) }
}

// attach runs conmon.Attach in the background; the channel gets its result.
func attach(c *container, ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, resize <-chan conmon.Size) <-chan error {
	done := make(chan error, 1)
	go func() { done <- conmon.Attach(ctx, c.opts.SocketDir, stdin, stdout, stderr, resize) }()
	return done
}

func waitAttach(t *testing.T, done <-chan error, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		t.Fatalf("Attach did not return within %v", timeout)
		return nil
	}
}

func TestAttachReadsLiveOutput(t *testing.T) {
	t.Parallel()
	c := newContainer(t, []string{"sh", "-c", "i=0; while :; do echo out$i; echo err$i >&2; i=$((i+1)); usleep 50000; done"}, nil)
	c.run()
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := attach(c, ctx, nil, &stdout, &stderr, nil)
	waitFor(t, "live stdout", 10*time.Second, stdout.contains("out"))
	waitFor(t, "live stderr", 10*time.Second, stderr.contains("err"))
	cancel()
	if err := waitAttach(t, done, 5*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Attach after cancel: %v, want context.Canceled", err)
	}
	if strings.Contains(stdout.String(), "err") || strings.Contains(stderr.String(), "out") {
		t.Errorf("streams mixed: stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}

func TestAttachStdinOnceEOFEndsCat(t *testing.T) {
	t.Parallel()
	c := newContainer(t, []string{"cat"}, func(_ *specs.Spec, o *conmon.Options) { o.Stdin, o.StdinOnce = true, true })
	c.run()
	var stdout syncBuffer
	done := attach(c, context.Background(), strings.NewReader("hello\nworld\n"), &stdout, io.Discard, nil)
	if err := waitAttach(t, done, 10*time.Second); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if got := stdout.String(); got != "hello\nworld\n" {
		t.Errorf("cat echoed %q, want %q", got, "hello\nworld\n")
	}
	if e := c.waitExit(10 * time.Second); e.Code != 0 {
		t.Errorf("cat exit code = %d, want 0 after end of stdin", e.Code)
	}
	if got := lines(readLog(t, c.opts.LogPath)); strings.Join(got, ",") != "hello,world" {
		t.Errorf("log lines = %q, want hello, world", got)
	}
}

func TestAttachStdinStaysOpenWithoutStdinOnce(t *testing.T) {
	t.Parallel()
	c := newContainer(t, []string{"cat"}, func(_ *specs.Spec, o *conmon.Options) { o.Stdin = true })
	c.run()
	for _, word := range []string{"first", "second"} {
		var stdout syncBuffer
		ctx, cancel := context.WithCancel(context.Background())
		done := attach(c, ctx, strings.NewReader(word+"\n"), &stdout, io.Discard, nil)
		waitFor(t, "cat to echo "+word, 10*time.Second, stdout.contains(word))
		cancel()
		waitAttach(t, done, 5*time.Second)
	}
	if !conmon.Alive(c.created.MonitorPID, c.created.MonitorStartTime) {
		t.Fatal("the container ended although stdin is not stdin-once")
	}
}

func TestAttachTerminalResize(t *testing.T) {
	t.Parallel()
	c := newContainer(t, []string{"sh"}, func(s *specs.Spec, o *conmon.Options) {
		s.Process.Terminal = true
		o.Terminal, o.Stdin = true, true
	})
	c.run()
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	resize := make(chan conmon.Size, 1)
	resize <- conmon.Size{Rows: 33, Cols: 77}
	var stdout syncBuffer
	done := attach(c, context.Background(), stdinR, &stdout, nil, resize)
	waitForTTYSize(t, stdinW, &stdout, "33 77")
	io.WriteString(stdinW, "exit 5\n")
	if err := waitAttach(t, done, 10*time.Second); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if e := c.waitExit(10 * time.Second); e.Code != 5 {
		t.Errorf("exit code = %d, want 5", e.Code)
	}
	for _, e := range readLog(t, c.opts.LogPath) {
		if e.stream != "stdout" {
			t.Fatalf("tty log entry on %s, want stdout only", e.stream)
		}
	}
}

func TestAttachToExitedContainer(t *testing.T) {
	t.Parallel()
	c := newContainer(t, []string{"true"}, nil)
	c.run()
	c.waitExit(10 * time.Second)
	err := conmon.Attach(context.Background(), c.opts.SocketDir, nil, io.Discard, io.Discard, nil)
	if !errors.Is(err, conmon.ErrNotRunning) {
		t.Fatalf("Attach after exit: %v, want ErrNotRunning", err)
	}
}

// TestAttachStdinLargerThanPipes sends more than the stdin pipe and the
// sockets hold: the monitor must hold back, not drop, and close stdin only
// after the last byte went in.
func TestAttachStdinLargerThanPipes(t *testing.T) {
	t.Parallel()
	c := newContainer(t, []string{"cat"}, func(_ *specs.Spec, o *conmon.Options) { o.Stdin, o.StdinOnce = true, true })
	c.run()
	input := strings.Repeat(strings.Repeat("x", 99)+"\n", 20000) // 2 MB
	var stdout syncBuffer
	done := attach(c, context.Background(), strings.NewReader(input), &stdout, io.Discard, nil)
	if err := waitAttach(t, done, 30*time.Second); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if got := stdout.String(); got != input {
		t.Fatalf("cat echoed %d bytes, want %d", len(got), len(input))
	}
	if e := c.waitExit(10 * time.Second); e.Code != 0 {
		t.Errorf("exit code = %d, want 0", e.Code)
	}
	if got := len(lines(readLog(t, c.opts.LogPath))); got != 20000 {
		t.Errorf("log has %d lines, want 20000", got)
	}
}

// blockedWriter never returns from Write until released: an attach client
// that stopped reading.
type blockedWriter struct{ release chan struct{} }

func (w blockedWriter) Write(p []byte) (int, error) {
	<-w.release
	return len(p), nil
}

// TestStalledAttachClientDoesNotStallTheContainer attaches a client that
// reads nothing while the container writes megabytes: the monitor must drop
// the client, not block the container or lose log lines.
func TestStalledAttachClientDoesNotStallTheContainer(t *testing.T) {
	t.Parallel()
	const n = 100000 // 4.1 MB of output
	c := newContainer(t, []string{"sh", "-c", "usleep 300000; yes 0123456789012345678901234567890123456789 | head -n " + strconv.Itoa(n)}, nil)
	c.create()
	stalled := blockedWriter{release: make(chan struct{})}
	done := attach(c, context.Background(), nil, stalled, stalled, nil)
	c.runc("start", c.id)
	if e := c.waitExit(20 * time.Second); e.Code != 0 {
		t.Errorf("exit code = %d, want 0", e.Code)
	}
	if got := len(lines(readLog(t, c.opts.LogPath))); got != n {
		t.Errorf("log has %d lines, want %d", got, n)
	}
	close(stalled.release)
	waitAttach(t, done, 5*time.Second)
}

// stuckStdin is an attach client's stdin that sends n bytes, then blocks
// until released: a client that still has stdin in flight, not in a write.
type stuckStdin struct {
	n       int
	release chan struct{}
}

func (r *stuckStdin) Read(p []byte) (int, error) {
	if r.n == 0 {
		<-r.release
		return 0, io.EOF
	}
	p = p[:min(len(p), r.n)]
	for i := range p {
		p[i] = 'y'
	}
	r.n -= len(p)
	return len(p), nil
}

// TestAttachEndsCleanlyWithStdinUnread exits the container while stdin its
// attach client sent is still unread in the monitor's socket: the client
// must see the end of the output and nil, not a reset connection (a unix
// socket closed with unread bytes resets its peer, whose next read fails
// with ECONNRESET). The container reads no stdin: its pipe (64 KiB) and the
// monitor's stdin buffer fill, the monitor stops reading the client, and
// the rest of the 13 frames waits in the socket when the container exits.
// The monitor may still read a few of them between the stdin pipe's end and
// the container's, so four containers play it at once, for the race to be
// met in most runs.
func TestAttachEndsCleanlyWithStdinUnread(t *testing.T) {
	t.Parallel()
	for i := range 4 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			c := newContainer(t, []string{"sh", "-c", "usleep 500000; exit 3"}, func(_ *specs.Spec, o *conmon.Options) { o.Stdin = true })
			c.run()
			stdin := &stuckStdin{n: 13 * 16 * 1024, release: make(chan struct{})}
			t.Cleanup(func() { close(stdin.release) })
			done := attach(c, context.Background(), stdin, io.Discard, io.Discard, nil)
			if err := waitAttach(t, done, 10*time.Second); err != nil {
				t.Fatalf("Attach with stdin unread at the exit: %v, want nil", err)
			}
			if e := c.waitExit(10 * time.Second); e.Code != 3 {
				t.Errorf("exit code = %d, want 3", e.Code)
			}
		})
	}
}

// endlessReader is an attach client's stdin that never ends.
type endlessReader struct{}

func (endlessReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'y'
	}
	return len(p), nil
}

// TestAttachRacingTheExitEndsCleanly attaches again and again while the
// container exits: every attach either ends with the output (nil) or finds
// the container gone (ErrNotRunning); a connection waiting to be accepted
// when the monitor closes its socket must not be reset.
func TestAttachRacingTheExitEndsCleanly(t *testing.T) {
	t.Parallel()
	c := newContainer(t, []string{"sh", "-c", "usleep 300000; exit 0"}, func(_ *specs.Spec, o *conmon.Options) { o.Stdin = true })
	c.run()
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				err := conmon.Attach(context.Background(), c.opts.SocketDir, endlessReader{}, io.Discard, io.Discard, nil)
				if errors.Is(err, conmon.ErrNotRunning) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Attach racing the exit: %v, want nil or ErrNotRunning", err)
	}
	c.waitExit(10 * time.Second)
}
