package monitor

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// criEntry is one line of a CRI log file, as the kubelet parses it.
var criEntry = regexp.MustCompile(`^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) (stdout|stderr) ([FP]) `)

// FuzzLogWriter writes arbitrary output, cut into arbitrary reads on both
// streams, with an arbitrary line limit. Every entry of the file must be one
// the kubelet parses (timestamp, stream, tag, no newline inside, at most the
// line limit long), and joining each stream's entries the kubelet's way (P
// parts up to the next F, which ends a line) must give back exactly what
// the container wrote: no byte lost, added or moved. The seed corpus is
// under testdata/fuzz/FuzzLogWriter and runs with every `go test`.
func FuzzLogWriter(f *testing.F) {
	f.Add([]byte("one\ntwo\n"), []byte{3, 5}, uint16(8))
	f.Add([]byte("0123456789abcdefgh\ntail without newline"), []byte{19, 200}, uint16(4))
	f.Add([]byte("\n\n\r\n\x00\xff\xfe\n"), []byte{1, 1, 1, 0, 2}, uint16(1))
	f.Add(bytes.Repeat([]byte("x\n"), 100), []byte{255}, uint16(16*1024))
	f.Fuzz(func(t *testing.T, data, cuts []byte, maxLine uint16) {
		if maxLine == 0 {
			return // the monitor's config never gives 0 (0 means the default)
		}
		path := filepath.Join(t.TempDir(), "0.log")
		w := newLogWriter(path, int(maxLine))
		if err := w.open(); err != nil {
			t.Fatal(err)
		}
		defer w.close()
		want := map[string][]byte{}
		now := time.Date(2024, 5, 6, 7, 8, 9, 10, time.UTC)
		for i, rest := 0, data; len(rest) > 0; i++ {
			n := len(rest)
			if i < len(cuts) {
				n = min(n, int(cuts[i])+1)
			}
			stream := "stdout"
			if i%2 == 1 {
				stream = "stderr"
			}
			if err := w.write(stream, rest[:n], now); err != nil {
				t.Fatal(err)
			}
			want[stream] = append(want[stream], rest[:n]...)
			rest = rest[n:]
		}
		got := reassemble(t, path, int(maxLine))
		for _, stream := range []string{"stdout", "stderr"} {
			if !bytes.Equal(got[stream], want[stream]) {
				t.Fatalf("%s: joined entries %q, written %q", stream, got[stream], want[stream])
			}
		}
	})
}

// reassemble parses a CRI log file and joins each stream's entries.
func reassemble(t *testing.T, path string, maxLine int) map[string][]byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	if len(raw) > 0 && raw[len(raw)-1] != '\n' {
		t.Fatalf("the file ends inside an entry: %q", raw[max(0, len(raw)-40):])
	}
	for _, line := range bytes.SplitAfter(raw, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		m := criEntry.FindSubmatchIndex(line)
		if m == nil {
			t.Fatalf("not a CRI log entry: %q", line)
		}
		if _, err := time.Parse(time.RFC3339Nano, string(line[m[2]:m[3]])); err != nil {
			t.Fatalf("timestamp of %q: %v", line, err)
		}
		content := line[m[1] : len(line)-1]
		if len(content) > maxLine {
			t.Fatalf("entry of %d bytes, over the limit of %s: %q", len(content), strconv.Itoa(maxLine), line)
		}
		stream := string(line[m[4]:m[5]])
		out[stream] = append(out[stream], content...)
		if line[m[6]] == 'F' {
			out[stream] = append(out[stream], '\n')
		}
	}
	return out
}
