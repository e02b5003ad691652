package monitor

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/minicri/minicri/conmon/wire"
)

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
