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

	if got := SocketHolders(path); !slices.Equal(got, []int{cmd.Process.Pid}) {
		t.Errorf("SocketHolders = %v, want the child %d alone", got, cmd.Process.Pid)
	}
	if got := FileHolders(lf); !slices.Equal(got, []int{cmd.Process.Pid}) {
		t.Errorf("FileHolders = %v, want the child %d alone", got, cmd.Process.Pid)
	}
	if d := Describe([]int{cmd.Process.Pid}); !strings.Contains(d, "pid "+strconv.Itoa(cmd.Process.Pid)+" (sleep 60) in state S") {
		t.Errorf("Describe = %q", d)
	}
}
