package monitor

import (
	"os"
	"strings"
	"testing"
)

func TestReadOnlyMapping(t *testing.T) {
	for _, tc := range []struct {
		line       string
		start, end uintptr
		ino        uint64
		ok         bool
	}{
		{"7f16b25a0000-7f16b25c0000 r--p 00001000 08:01 9978220                    /usr/bin/minicri-conmon", 0x7f16b25a0000, 0x7f16b25c0000, 9978220, true},
		{"00400000-00452000 r--p 00000000 08:02 173521 /usr/bin/minicri-conmon", 0x400000, 0x452000, 173521, true},
		{"7f16b25a0000-7f16b25c0000 r-xp 00001000 08:01 9978220 /usr/bin/minicri-conmon", 0, 0, 0, false}, // text
		{"7f16b25a0000-7f16b25c0000 rw-p 00000000 00:00 0 ", 0, 0, 0, false},
		{"7f16b25c0000-7f16b25a0000 r--p 00001000 08:01 9978220 /x", 0, 0, 0, false}, // end before start
		{"7f16b25a0000-7f16b25c0000 r--p 00001000 08:01 12ab /x", 0, 0, 0, false},
		{"7f16b25a0000 r--p 00001000 08:01 9978220 /x", 0, 0, 0, false},
		{"", 0, 0, 0, false},
	} {
		start, end, ino, ok := readOnlyMapping([]byte(tc.line))
		if start != tc.start || end != tc.end || ino != tc.ino || ok != tc.ok {
			t.Errorf("readOnlyMapping(%q) = %#x, %#x, %d, %v; want %#x, %#x, %d, %v", tc.line, start, end, ino, ok, tc.start, tc.end, tc.ino, tc.ok)
		}
	}
}

// TestDropReadOnlyData runs the drop in the test binary itself: afterwards
// the process still reads its read-only data (the pages come back on
// demand), and fewer of them are mapped than before.
func TestDropReadOnlyData(t *testing.T) {
	before := mappedReadOnly(t)
	dropReadOnlyData(make([]byte, 64<<10))
	if s := strings.Repeat("x", 3); s != "xxx" { // runs code that reads tables
		t.Fatal("the process cannot read its data any more")
	}
	after := mappedReadOnly(t)
	if after >= before {
		t.Errorf("read-only data of the binary: %d KiB mapped before, %d KiB after the drop", before, after)
	}
}

// mappedReadOnly is the Rss of the test binary's r--p mappings, in KiB.
func mappedReadOnly(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	exe, _ := os.Readlink("/proc/self/exe")
	total, in := 0, false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && strings.Contains(f[0], "-") {
			in = f[1] == "r--p" && f[5] == exe
			continue
		}
		if in && len(f) >= 2 && f[0] == "Rss:" {
			n := 0
			for _, c := range f[1] {
				n = n*10 + int(c-'0')
			}
			total += n
		}
	}
	return total
}

// TestDropReadOnlyDataAllocatesOnlyPaths: the drop runs after every join of
// a monitor whose collector is off, so what it allocates stays. The two
// path names the system calls take are all it may allocate.
func TestDropReadOnlyDataAllocatesOnlyPaths(t *testing.T) {
	buf := make([]byte, 64<<10)
	if n := testing.AllocsPerRun(5, func() { dropReadOnlyData(buf) }); n > 2 {
		t.Errorf("dropReadOnlyData allocates %v times, want at most 2", n)
	}
}
