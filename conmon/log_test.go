package conmon_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/minicri/minicri/conmon"
)

func TestLogStdoutAndStderrLines(t *testing.T) {
	t.Parallel()
	c := newContainer(t, []string{"sh", "-c", "echo out; echo err >&2; echo; echo 'two  spaces '"}, nil)
	before := time.Now()
	c.run()
	if e := c.waitExit(10 * time.Second); e.Code != 0 {
		t.Fatalf("exit code = %d, want 0", e.Code)
	}
	entries := readLog(t, c.opts.LogPath)
	var got []string
	for _, e := range entries {
		tag := "F"
		if e.partial {
			tag = "P"
		}
		got = append(got, e.stream+" "+tag+" "+e.content)
		if e.at.Before(before.Add(-time.Second)) || e.at.After(time.Now()) {
			t.Errorf("timestamp %v not within the container's run", e.at)
		}
	}
	// stdout and stderr are separate pipes: their relative order is not kept.
	want := map[string]bool{"stdout F out": true, "stderr F err": true, "stdout F ": true, "stdout F two  spaces ": true}
	if len(got) != len(want) {
		t.Fatalf("log entries = %q, want %d entries %v", got, len(want), want)
	}
	for _, g := range got {
		if !want[g] {
			t.Errorf("unexpected log entry %q (all: %q)", g, got)
		}
	}
}

func TestLogLongLineSplitsIntoPartials(t *testing.T) {
	t.Parallel()
	const length = 40 * 1024
	c := newContainer(t, []string{"sh", "-c", "head -c " + strconv.Itoa(length) + " /dev/zero | tr '\\0' x; echo; echo short"}, nil)
	c.run()
	c.waitExit(10 * time.Second)
	entries := readLog(t, c.opts.LogPath)
	if len(entries) < 4 {
		t.Fatalf("got %d entries, want the long line in at least 3 parts and a short line", len(entries))
	}
	long, short := entries[:len(entries)-1], entries[len(entries)-1]
	var joined strings.Builder
	for i, e := range long {
		if last := i == len(long)-1; e.partial == last {
			t.Errorf("entry %d of the long line: partial=%v, want P parts and one F at the end", i, e.partial)
		}
		if len(e.content) > 16*1024 {
			t.Errorf("entry %d is %d bytes, longer than the 16 KiB max line", i, len(e.content))
		}
		joined.WriteString(e.content)
	}
	if joined.String() != strings.Repeat("x", length) {
		t.Errorf("joined parts: %d bytes, want %d x's", joined.Len(), length)
	}
	if short.partial || short.content != "short" {
		t.Errorf("after the long line: %+v, want F \"short\"", short)
	}
}

func TestLogMaxLineOption(t *testing.T) {
	t.Parallel()
	c := newContainer(t, []string{"echo", "0123456789"}, func(_ *specs.Spec, o *conmon.Options) { o.LogMaxLine = 4 })
	c.run()
	c.waitExit(10 * time.Second)
	var got []string
	for _, e := range readLog(t, c.opts.LogPath) {
		got = append(got, map[bool]string{true: "P", false: "F"}[e.partial]+":"+e.content)
	}
	if want := "P:0123 P:4567 F:89"; strings.Join(got, " ") != want {
		t.Errorf("entries = %q, want %q", strings.Join(got, " "), want)
	}
}

func TestLogLineWithoutNewlineAtExit(t *testing.T) {
	t.Parallel()
	c := newContainer(t, []string{"sh", "-c", "echo first; printf 'no newline'"}, nil)
	c.run()
	c.waitExit(10 * time.Second)
	entries := readLog(t, c.opts.LogPath)
	if len(entries) != 2 {
		t.Fatalf("entries = %+v, want 2", entries)
	}
	if last := entries[1]; !last.partial || last.content != "no newline" {
		t.Errorf("last entry = %+v, want P \"no newline\": the kubelet shows it without adding a newline", last)
	}
}

func TestNoLogPathDiscardsOutput(t *testing.T) {
	t.Parallel()
	c := newContainer(t, []string{"sh", "-c", "echo lost; exit 4"}, func(_ *specs.Spec, o *conmon.Options) { o.LogPath = "" })
	c.run()
	if e := c.waitExit(10 * time.Second); e.Code != 4 {
		t.Fatalf("exit code = %d, want 4", e.Code)
	}
}

// TestReopenLogAfterRenameLosesNoLine plays the kubelet's rotation: rename the
// log, ask for a reopen, and expect every line in one file or the other.
func TestReopenLogAfterRenameLosesNoLine(t *testing.T) {
	t.Parallel()
	c := newContainer(t, []string{"sh", "-c", "i=0; while :; do echo $i; i=$((i+1)); usleep 500; done"}, nil)
	c.run()
	counted := func(path string, n int) func() bool {
		return func() bool {
			b, _ := os.ReadFile(path)
			return strings.Count(string(b), "\n") >= n
		}
	}
	waitFor(t, "100 lines in the log", 10*time.Second, counted(c.opts.LogPath, 100))
	rotated := c.opts.LogPath + ".20240101-000000"
	if err := os.Rename(c.opts.LogPath, rotated); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "lines after the rename", 10*time.Second, counted(rotated, 200))
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	if err := conmon.ReopenLog(ctx, c.opts.SocketDir); err != nil {
		t.Fatalf("ReopenLog: %v", err)
	}
	waitFor(t, "100 lines in the new log", 10*time.Second, counted(c.opts.LogPath, 100))
	c.runc("kill", c.id, "KILL")
	c.waitExit(10 * time.Second)

	old, cur := numbers(t, readLog(t, rotated)), numbers(t, readLog(t, c.opts.LogPath))
	all := append(old, cur...)
	for i, n := range all {
		if n != i {
			t.Fatalf("line %d holds %d (old file %d..%d, new file %d..%d): a line was lost or repeated",
				i, n, old[0], old[len(old)-1], cur[0], cur[len(cur)-1])
		}
	}
}

func numbers(t *testing.T, entries []logEntry) []int {
	t.Helper()
	var ns []int
	for _, l := range lines(entries) {
		n, err := strconv.Atoi(l)
		if err != nil {
			t.Fatalf("log line %q is not a number", l)
		}
		ns = append(ns, n)
	}
	if len(ns) == 0 {
		t.Fatal("empty log")
	}
	return ns
}

func TestReopenLogOfExitedContainer(t *testing.T) {
	t.Parallel()
	c := newContainer(t, []string{"true"}, nil)
	c.run()
	c.waitExit(10 * time.Second)
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	if err := conmon.ReopenLog(ctx, c.opts.SocketDir); !errorIs(err, conmon.ErrNotRunning) {
		t.Fatalf("ReopenLog after exit: %v, want ErrNotRunning", err)
	}
}

// TestSocketsInALongDirectory reaches sockets whose path does not fit in
// sun_path: the monitor binds them relative to its directory, the client
// dials through /proc/self/fd, runc sends the pty master through the
// monitor's /proc/PID/fd.
func TestSocketsInALongDirectory(t *testing.T) {
	t.Parallel()
	c := newContainer(t, []string{"sh", "-c", "while :; do echo tick; usleep 50000; done"}, func(s *specs.Spec, o *conmon.Options) {
		o.SocketDir = filepath.Join(o.SocketDir, strings.Repeat("long-directory-name-", 6))
		s.Process.Terminal, o.Terminal = true, true
	})
	if len(c.opts.SocketDir) <= 108 {
		t.Fatalf("socket dir %d bytes long, want more than sun_path holds", len(c.opts.SocketDir))
	}
	c.run()
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	if err := conmon.ReopenLog(ctx, c.opts.SocketDir); err != nil {
		t.Fatalf("ReopenLog: %v", err)
	}
	var out syncBuffer
	actx, acancel := context.WithCancel(ctx)
	done := attach(c, actx, nil, &out, nil, nil)
	waitFor(t, "attached output", 5*time.Second, out.contains("tick"))
	acancel()
	waitAttach(t, done, 5*time.Second)
}
