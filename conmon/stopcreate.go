package conmon

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon/wire"
	"github.com/minicri/minicri/internal/procstat"
)

// StopCreate kills a create still under way for the container whose socket
// directory is socketDir, and returns once it is gone (cleanupTimeout at
// most). The create runs in a monitor's first image, or in a join helper of
// a shared monitor, each the leader of a process group with the runtime's
// create. A daemon that died during CreateContainer leaves it running: its
// successor rolls the container back, and a create that finishes after that
// roll-back's runtime delete leaves a container, its runtime state and its
// monitor that no record names.
//
// The creator names itself in socketDir (wire.CreatorFile) while it
// creates; it is taken for the creator only if it is a group leader whose
// working directory is socketDir itself (the same inode: no pod or host
// user can make that), and no process is ever found by its command line.
func StopCreate(socketDir string) error {
	pgid, ok := creator(socketDir)
	if !ok {
		return nil
	}
	if err := unix.Kill(-pgid, unix.SIGKILL); err != nil && err != unix.ESRCH {
		return fmt.Errorf("kill the create of %s (process group %d): %w", socketDir, pgid, err)
	}
	deadline := time.Now().Add(cleanupTimeout)
	for procstat.Live(pgid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the create of %s (process group %d) still runs after SIGKILL", socketDir, pgid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// creator is the process group of the create under way in socketDir, if
// there is one.
func creator(socketDir string) (int, bool) {
	data, err := os.ReadFile(filepath.Join(socketDir, wire.CreatorFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return 0, false
	}
	if pgid, err := unix.Getpgid(pid); err != nil || pgid != pid {
		return 0, false
	}
	var dir, cwd unix.Stat_t
	if unix.Stat(socketDir, &dir) != nil || unix.Stat("/proc/"+strconv.Itoa(pid)+"/cwd", &cwd) != nil ||
		dir.Dev != cwd.Dev || dir.Ino != cwd.Ino {
		return 0, false
	}
	return pid, true
}
