package monitor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCutLine(t *testing.T) {
	for _, tc := range []struct {
		in, line, rest string
		full           bool
	}{
		{"abc\ndef", "abc", "def", true},
		{"\n", "", "", true},
		{"abcd\n", "abcd", "", true}, // exactly maxLine: still one entry
		{"abcde\n", "abcd", "e\n", false},
		{"abcdefgh", "abcd", "efgh", false},
		{"ab", "ab", "", false},
	} {
		line, rest, full := cutLine([]byte(tc.in), 4)
		if string(line) != tc.line || string(rest) != tc.rest || full != tc.full {
			t.Errorf("cutLine(%q) = %q, %q, %v; want %q, %q, %v", tc.in, line, rest, full, tc.line, tc.rest, tc.full)
		}
	}
}

func newTestLog(t *testing.T, maxLine int) (*logWriter, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "0.log")
	w := newLogWriter(path, maxLine)
	if err := w.open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.close)
	return w, path
}

func readEntries(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if l == "" {
			continue
		}
		// Drop the timestamp, keep "stream tag content\n".
		_, rest, _ := strings.Cut(l, " ")
		out = append(out, rest)
	}
	return out
}

func TestLogWriterFormat(t *testing.T) {
	w, path := newTestLog(t, 8)
	now := time.Date(2024, 1, 2, 3, 4, 5, 600000000, time.FixedZone("x", 3600))
	for _, chunk := range []struct{ stream, data string }{
		{"stdout", "one\ntwo\n"},
		{"stderr", "0123456789abcdefgh\n"},
		{"stdout", "tail without newline"},
		{"stdout", "\n"},
	} {
		if err := w.write(chunk.stream, []byte(chunk.data), now); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"stdout F one\n", "stdout F two\n",
		"stderr P 01234567\n", "stderr P 89abcdef\n", "stderr F gh\n",
		"stdout P tail wit\n", "stdout P hout new\n", "stdout P line\n",
		"stdout F \n",
	}
	if got := readEntries(t, path); strings.Join(got, "") != strings.Join(want, "") {
		t.Errorf("log:\n%s\nwant:\n%s", strings.Join(got, ""), strings.Join(want, ""))
	}
	b, _ := os.ReadFile(path)
	if ts, _, _ := strings.Cut(string(b), " "); ts != "2024-01-02T02:04:05.6Z" {
		t.Errorf("timestamp %q, want RFC 3339 in UTC with trailing zeros trimmed", ts)
	}
}

// TestLogWriterManyLines writes more lines in one read than one writev takes.
func TestLogWriterManyLines(t *testing.T) {
	w, path := newTestLog(t, 16*1024)
	data := strings.Repeat("x\n", 1000) + strings.Repeat("y", 100)
	if err := w.write("stdout", []byte(data), time.Now()); err != nil {
		t.Fatal(err)
	}
	got := readEntries(t, path)
	if len(got) != 1001 || got[0] != "stdout F x\n" || got[999] != "stdout F x\n" || got[1000] != "stdout P "+strings.Repeat("y", 100)+"\n" {
		t.Fatalf("got %d entries, first %q, last %q", len(got), got[0], got[len(got)-1])
	}
}

func TestLogWriterReopen(t *testing.T) {
	w, path := newTestLog(t, 100)
	w.write("stdout", []byte("before\n"), time.Now())
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	w.write("stdout", []byte("between\n"), time.Now())
	if err := w.reopen(); err != nil {
		t.Fatal(err)
	}
	w.write("stdout", []byte("after\n"), time.Now())
	if got := readEntries(t, path+".1"); strings.Join(got, "") != "stdout F before\nstdout F between\n" {
		t.Errorf("rotated file: %q", got)
	}
	if got := readEntries(t, path); strings.Join(got, "") != "stdout F after\n" {
		t.Errorf("new file: %q", got)
	}

	// A reopen that fails keeps the old file in use.
	os.Remove(path)
	w.path = filepath.Join(path+".missing", "0.log")
	if err := w.reopen(); err == nil {
		t.Fatal("reopen into a missing directory: no error")
	}
	if err := w.write("stdout", []byte("kept\n"), time.Now()); err != nil {
		t.Fatalf("write after a failed reopen: %v", err)
	}
}

func TestLogWriterWithoutPath(t *testing.T) {
	w := newLogWriter("", 100)
	if err := w.open(); err != nil {
		t.Fatal(err)
	}
	if err := w.write("stdout", []byte("dropped\n"), time.Now()); err != nil {
		t.Fatal(err)
	}
}
