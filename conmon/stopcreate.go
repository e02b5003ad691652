package conmon

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/procstat"
)

// StopCreate kills a create still under way for the container whose socket
// directory is socketDir, and returns once it is gone (cleanupTimeout at
// most). The create runs in a monitor's first image, or in a join helper of
// a shared monitor, each in a process group of its own with the runtime's
// create. A daemon that died during CreateContainer leaves it running: its
// successor rolls the container back, and a create that finishes after that
// roll-back's runtime delete leaves a container, its runtime state and its
// monitor that no record names. Found by command line, as nothing else
// names it: the daemon learns the monitor's pid only from its report.
func StopCreate(socketDir string) error {
	groups := creatingGroups(socketDir)
	for _, pgid := range groups {
		if err := unix.Kill(-pgid, unix.SIGKILL); err != nil && err != unix.ESRCH {
			return fmt.Errorf("kill the create of %s (process group %d): %w", socketDir, pgid, err)
		}
	}
	deadline := time.Now().Add(cleanupTimeout)
	for _, pgid := range groups {
		for procstat.Live(pgid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("the create of %s (process group %d) still runs after SIGKILL", socketDir, pgid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// creatingGroups lists the process groups of the monitors' first images
// and the join helpers that create the container of socketDir. A serving
// monitor (its command is "serve") is left alone: its create is done.
func creatingGroups(socketDir string) []int {
	want := "\x00--socket-dir\x00" + socketDir + "\x00"
	var groups []int
	procstat.EachCmdline(func(pid int, cmdline string) {
		if !strings.Contains(cmdline, want) {
			return
		}
		args := strings.SplitN(cmdline, "\x00", 3)
		if len(args) < 3 || filepath.Base(args[0]) != BinaryName || (args[1] != "--id" && args[1] != "join") {
			return
		}
		// Each is the leader of its group (a session of its own, or
		// Setpgid); anything else is not one of ours to kill.
		if pgid, err := unix.Getpgid(pid); err == nil && pgid == pid {
			groups = append(groups, pid)
		}
	})
	return groups
}
