package conmon_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/conmon/wire"
	"github.com/minicri/minicri/internal/procstat"
)

// StopCreate kills only the process that names itself in the socket dir
// and works in it: one whose command line looks like a monitor's create
// for that dir (a pod or a host user can make such a one) is left alone,
// and so is one named in the file that works elsewhere.
func TestStopCreateKillsOnlyTheCreator(t *testing.T) {
	for _, c := range []struct {
		name       string
		inDir      bool // working directory: the socket dir
		named      bool // its pid in the creator file
		wantKilled bool
	}{
		{"the creator", true, true, true},
		{"a monitor's command line, not named", false, false, false},
		{"named, working elsewhere", false, true, false},
		{"in the dir, not named", true, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			socketDir := t.TempDir()
			// Shaped as a monitor's create of socketDir, as the old
			// search by command line took it.
			cmd := exec.Command(os.Args[0])
			cmd.Args = []string{conmon.BinaryName, "--id", "x", "--socket-dir", socketDir}
			cmd.Env = append(os.Environ(), idleEnv+"=1")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Dir = "/"
			if c.inDir {
				cmd.Dir = socketDir
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { _ = cmd.Wait(); close(exited) }()
			t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
			if c.named {
				if err := os.WriteFile(filepath.Join(socketDir, wire.CreatorFile), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := conmon.StopCreate(socketDir); err != nil {
				t.Fatalf("StopCreate: %v", err)
			}
			if c.wantKilled {
				select {
				case <-exited:
				case <-time.After(10 * time.Second):
					t.Fatal("the creator still runs 10 s after StopCreate returned")
				}
				return
			}
			if !procstat.Live(cmd.Process.Pid) {
				t.Errorf("StopCreate killed a process that is not the creator")
			}
		})
	}
}
