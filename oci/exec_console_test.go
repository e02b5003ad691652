package oci

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// sendFD connects to path as the runtime does and sends f.
func sendFD(t *testing.T, path string, f *os.File) {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, _, err := conn.(*net.UnixConn).WriteMsgUnix([]byte("/dev/pts/x"), unix.UnixRights(int(f.Fd())), nil); err != nil {
		t.Fatal(err)
	}
}

// TestExecConsoleSocketTakesOnlyAPtyMaster: the console socket hands over
// a pty master, refuses any other descriptor, gives up once the runtime
// exited without connecting, works in a state directory whose path is
// longer than a socket's, and leaves no file behind.
func TestExecConsoleSocketTakesOnlyAPtyMaster(t *testing.T) {
	short := t.TempDir()
	long := filepath.Join(short, strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(long, 0o700); err != nil {
		t.Fatal(err)
	}
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer slave.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()

	for _, tc := range []struct {
		name, dir string
		send      *os.File // nil: the runtime never connects
		ok        bool
	}{
		{"pty master", short, master, true},
		{"pty master, long state dir", long, master, true},
		{"a pipe", short, pr, false},
		{"a pty slave", short, slave, false},
		{"no connection", short, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := listenConsole(tc.dir, "exec-test.sock")
			if err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			if tc.send != nil {
				sendFD(t, c.dial, tc.send)
			}
			close(exited) // what was sent is there before the runtime exits
			done := make(chan struct{})
			var got *os.File
			go func() {
				defer close(done)
				got, err = c.receive(exited)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("receive did not return 10 s after the runtime exited")
			}
			c.Close()
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok %v", err, tc.ok)
			}
			if got != nil {
				if _, err := unix.IoctlGetInt(int(got.Fd()), unix.TIOCGPTN); err != nil {
					t.Errorf("received %s, not a pty master: %v", got.Name(), err)
				}
				got.Close()
			}
			if entries, _ := os.ReadDir(tc.dir); len(entries) > 0 && tc.dir == short {
				for _, e := range entries {
					if strings.HasPrefix(e.Name(), "exec-") {
						t.Errorf("left %s in the state directory", e.Name())
					}
				}
			}
			if tc.dir == long {
				if _, err := os.Stat(filepath.Join(long, "exec-test.sock")); !os.IsNotExist(err) {
					t.Errorf("the socket is still there: %v", err)
				}
			}
		})
	}
}
