package monitor

import (
	"os"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon/wire"
)

// TestCompactFDs runs in a child process: it renumbers descriptors 3, 4, ...,
// which in the test process would close files the test framework holds.
func TestCompactFDs(t *testing.T) {
	if os.Getenv("COMPACT_FDS_CHILD") == "" {
		runChild(t, "TestCompactFDs", "COMPACT_FDS_CHILD=1")
		return
	}
	var p1, p2 [2]int
	unix.Pipe2(p1[:], unix.O_CLOEXEC)
	unix.Pipe2(p2[:], unix.O_CLOEXEC)
	for _, fd := range []int{3, 4} {
		if fd != p1[0] && fd != p1[1] && fd != p2[0] && fd != p2[1] {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
				t.Skipf("fd %d is taken by the test binary itself; renumbering would break it", fd)
			}
		}
	}
	a, b, c := p1[1], p2[1], p1[1] // c repeats a: one number for both
	none := -1
	fds := []*int{&b, &none, &a, &c}
	if err := compactFDs(fds); err != nil {
		t.Fatal(err)
	}
	if b != 3 || none != -1 || a != 4 || c != 4 {
		t.Fatalf("numbers b=%d none=%d a=%d c=%d, want 3 -1 4 4", b, none, a, c)
	}
	for fd, reader := range map[int]int{3: p2[0], 4: p1[0]} {
		if flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC != 0 {
			t.Errorf("fd %d is close-on-exec; the exec would lose it", fd)
		}
		unix.Write(fd, []byte{byte(fd)})
		var got [1]byte
		if n, _ := unix.Read(reader, got[:]); n != 1 || got[0] != byte(fd) {
			t.Errorf("fd %d is not the pipe it should be", fd)
		}
	}
}

func runChild(t *testing.T, test, env string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	attr := &os.ProcAttr{Env: append(os.Environ(), env), Files: []*os.File{nil, os.Stdout, os.Stderr}}
	p, err := os.StartProcess(exe, []string{exe, "-test.run=^" + test + "$", "-test.v"}, attr)
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait()
	if err != nil || !st.Success() {
		t.Fatalf("child test %s: %v %v", test, st, err)
	}
}

func TestHandoverArgsRoundTrip(t *testing.T) {
	cfg := wire.Config{ID: "c", Bundle: "/b", Runtime: "runc", ExitFile: "/e", SocketDir: "/s",
		LogPath: "/l", LogMaxLine: 10, Terminal: true, Stdin: true}
	m := newMonitor(cfg)
	m.syncFD, m.stdout.fd, m.stdin, m.attachFD, m.controlFD, m.log.fd = 3, 4, 4, 5, 6, 7
	m.containerPID, m.oom, m.sharedPIDNS, m.logMade = 1234, oomCounter{path: "/sys/x", start: 2}, true, true

	got, err := parseHandover(append(append(m.handoverArgs(), "--"), cfg.Args()...))
	if err != nil {
		t.Fatal(err)
	}
	for name, pair := range map[string][2]int{
		"sync": {got.syncFD, 3}, "stdout": {got.stdout.fd, 4}, "stderr": {got.stderr.fd, -1},
		"stdin": {got.stdin, 4}, "attach": {got.attachFD, 5}, "control": {got.controlFD, 6},
		"log": {got.log.fd, 7}, "pid": {got.containerPID, 1234}, "oom start": {got.oom.start, 2},
	} {
		if pair[0] != pair[1] {
			t.Errorf("%s = %d, want %d", name, pair[0], pair[1])
		}
	}
	if got.oom.path != "/sys/x" || !got.sharedPIDNS || !got.logMade || got.cfg.ID != "c" || !got.cfg.Terminal {
		t.Errorf("state lost in the handover: %+v", got)
	}
	if _, err := parseHandover([]string{"pid=" + strconv.Itoa(1)}); err == nil {
		t.Error("handover without -- accepted")
	}
}

// TestParseHandoverAllocatesOnlyTheMonitor: a shared monitor, whose
// collector is off, parses a handover for every container that joins it
// and keeps whatever that allocates. Only the monitor and its log writer
// are made; a map of the arguments (~700 B), the log writer's own
// 1.5 KiB writev vector, or a table of flags per flag (~5 KB) would show.
func TestParseHandoverAllocatesOnlyTheMonitor(t *testing.T) {
	cfg := wire.Config{ID: "c", Bundle: "/b", Runtime: "runc", ExitFile: "/e", SocketDir: "/s",
		LogPath: "/l", LogMaxLine: 10, Terminal: true, Stdin: true}
	m := newMonitor(cfg)
	m.syncFD, m.stdout.fd, m.stdin, m.attachFD, m.controlFD, m.log.fd = 3, 4, 4, 5, 6, 7
	m.containerPID, m.oom = 1234, oomCounter{path: "/sys/x", start: 2}
	args := append(append(m.handoverArgs(), "--"), cfg.Args()...)
	var bytes uint64
	allocs := testing.AllocsPerRun(20, func() {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, err := parseHandover(args); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		bytes = after.TotalAlloc - before.TotalAlloc
	})
	if allocs > 2 || bytes > 1024 {
		t.Errorf("parseHandover: %v allocations, %d bytes; want the monitor and its log writer only (2, under 1 KiB)", allocs, bytes)
	}
}
