package procstat

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A process that inherited a listening socket is found by the socket's
// path, and so is one that has a file open; this process never is.
func TestHoldersOfASocketAndAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lf, err := l.(*net.UnixListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	cmd := exec.Command("sleep", "60")
	cmd.ExtraFiles = []*os.File{lf}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	if got := SocketHolders(path); !slices.Equal(got.PIDs, []int{cmd.Process.Pid}) || got.Cut {
		t.Errorf("SocketHolders = %+v, want the child %d alone", got, cmd.Process.Pid)
	}
	got := FileHolders(lf)
	if !slices.Equal(got.PIDs, []int{cmd.Process.Pid}) || got.Cut {
		t.Errorf("FileHolders = %+v, want the child %d alone", got, cmd.Process.Pid)
	}
	if d := got.String(); !strings.Contains(d, "pid "+strconv.Itoa(cmd.Process.Pid)+" (sleep 60) in state S") {
		t.Errorf("String = %q", d)
	}
	if !HoldsFile(cmd.Process.Pid, lf) || HoldsFile(os.Getppid(), lf) {
		t.Errorf("HoldsFile: the child %t, the test's parent %t; want true, false", HoldsFile(cmd.Process.Pid, lf), HoldsFile(os.Getppid(), lf))
	}
}

// A process that holds many descriptors (a pod can hold millions) makes
// a search stop at its budget, say so, and read no more.
func TestHoldersSearchStopsAtItsBudget(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// This process's own descriptors are not searched; a child's are.
	// 200 copies of /dev/null in the child, then the file.
	var extra []*os.File
	for range 200 {
		extra = append(extra, f)
	}
	target, err := os.Open(filepath.Join(t.TempDir(), "."))
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	cmd := exec.Command("sleep", "60")
	cmd.ExtraFiles = append(extra, target)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	if holdsFile(cmd.Process.Pid, target, 100) {
		t.Errorf("HoldsFile found a descriptor past a budget of 100")
	}
	match, _ := sameFile(target)
	got := holders(match, 100)
	if !got.Cut || len(got.PIDs) != 0 {
		t.Errorf("FileHolders with a budget of 100 = %+v, want cut, none found", got)
	}
	if s := got.String(); !strings.Contains(s, "budget") {
		t.Errorf("String of a cut search = %q, want it to say so", s)
	}
	if !holdsFile(cmd.Process.Pid, target, 1<<20) {
		t.Errorf("HoldsFile missed the descriptor within the budget")
	}
}
