package monitor

import (
	"os"
	"strings"
	"testing"
)

func TestParseUint(t *testing.T) {
	for _, tc := range []struct {
		in   string
		base uint64
		want uint64
	}{
		{"7f16b25a0000", 16, 0x7f16b25a0000},
		{"00400000", 16, 0x400000},
		{"9978220", 10, 9978220},
		{"12ab", 10, 0},
		{"-1", 10, 0},
		{"", 16, 0},
	} {
		if got := parseUint([]byte(tc.in), tc.base); got != tc.want {
			t.Errorf("parseUint(%q, %d) = %d, want %d", tc.in, tc.base, got, tc.want)
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

func TestFields(t *testing.T) {
	line := []byte("7f16b25a0000-7f16b25c0000 r--p 00001000 08:01   9978220    /usr/bin/minicri-conmon")
	var f [6][]byte
	if n := fields(line, f[:]); n != 6 || string(f[0]) != "7f16b25a0000-7f16b25c0000" || string(f[4]) != "9978220" || string(f[5]) != "/usr/bin/minicri-conmon" {
		t.Errorf("fields: %d %q", n, f)
	}
	if n := fields([]byte("7f16b25a0000-7f16b25c0000 rw-p 00000000 00:00 0 "), f[:]); n != 5 {
		t.Errorf("an anonymous mapping: %d fields, want 5", n)
	}
}

// TestDropReadOnlyDataAllocatesNothing: the drop runs after every join of
// a monitor whose collector is off, so what it allocates stays (bytes.Fields
// once left ~7 KB a join). The two path names the system calls take are
// all it may allocate.
func TestDropReadOnlyDataAllocatesOnlyPaths(t *testing.T) {
	buf := make([]byte, 64<<10)
	if n := testing.AllocsPerRun(5, func() { dropReadOnlyData(buf) }); n > 2 {
		t.Errorf("dropReadOnlyData allocates %v times, want at most 2", n)
	}
}
