//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var criLogLine = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d) (stdout|stderr) (F|P) `)

func TestLogsInCRIFormatWithPartialLines(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("logs")
	pod := d.runPod(t, podCfg)
	// A 40000-byte line is longer than the monitor's 16 KiB line limit.
	cmd := "echo out; echo err >&2; head -c 40000 /dev/zero | tr '\\0' x; echo; printf tail-without-newline"
	st, _ := d.runToExit(t, pod, podCfg, containerConfig("c", ref, "sh", "-c", cmd))
	raw, err := os.ReadFile(st.GetLogPath())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	partials := 0
	for _, l := range lines {
		if !criLogLine.MatchString(l) {
			t.Errorf("not a CRI log line: %.80q", l)
		}
		if strings.Contains(l, " stdout P ") {
			partials++
		}
	}
	if partials < 2 {
		t.Errorf("%d partial lines, want the long line split into P parts", partials)
	}
	// Each stream reassembled on its own, as the kubelet joins P parts: the
	// monitor reads stdout and stderr as they come, one read each in turn,
	// so the order of lines across the two pipes is not the order of the
	// writes (the "err" line may land between parts of the long line).
	streams := map[string]string{
		"stdout": "out\n" + strings.Repeat("x", 40000) + "\ntail-without-newline",
		"stderr": "err\n",
	}
	for stream, want := range streams {
		if got := parseLogStream(raw, stream); got != want {
			t.Errorf("reassembled %s differs: got %d bytes, want %d (starts %q, ends %q)", stream, len(got), len(want), got[:min(len(got), 30)], got[max(0, len(got)-30):])
		}
	}
}

// The kubelet rotates logs by renaming the file and calling
// ReopenContainerLog; no line may be lost between the two files.
func TestReopenContainerLogLosesNoLine(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("rotate")
	pod := d.runPod(t, podCfg)
	id := d.startContainer(t, pod, podCfg, containerConfig("counter", ref, "sh", "-c", "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); echo $i; usleep 1000; done"))
	path := d.status(t, id).GetLogPath()
	waitFor(t, "some lines", 10*time.Second, func() bool { b, _ := os.ReadFile(path); return len(b) > 2000 })
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := d.Runtime.ReopenContainerLog(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "lines in the new file", 10*time.Second, func() bool { b, _ := os.ReadFile(path); return len(b) > 2000 })
	if err := d.Runtime.StopContainer(context.Background(), id, 0); err != nil {
		t.Fatal(err)
	}
	old, cur := numbersIn(t, path+".1"), numbersIn(t, path)
	all := append(old, cur...)
	for i, n := range all {
		if n != i+1 {
			t.Fatalf("line %d holds %d: a line was lost or repeated at the rotation (old file ends at %d, new starts at %d)", i, n, old[len(old)-1], cur[0])
		}
	}
	_ = os.Remove(path + ".1")
}

func numbersIn(t *testing.T, path string) []int {
	t.Helper()
	var out []int
	for _, l := range strings.Split(strings.TrimSpace(readLog(t, path)), "\n") {
		n, err := strconv.Atoi(l)
		if err != nil {
			t.Fatalf("%s: unexpected line %q", path, l)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		t.Fatal(fmt.Sprintf("%s holds no lines", path))
	}
	return out
}
