package monitor

import (
	"errors"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// ExecCommand is the first argument of the exec shim.
const ExecCommand = "exec"

// execLogFD is where the daemon reads the runtime's log of an exec (the
// runtime's --log is /proc/self/fd/4); the shim's own errors go there too.
const execLogFD = 4

// Exec is the exec shim: "minicri-conmon exec RUNTIME ... exec --detach
// --pid-file FILE ... ID". Attached, runc would copy the process's output
// through pipes (or a pty) of its own; detached it hands the process the
// shim's stdio, the daemon's pipes (or sends the container's pty to the
// daemon's console socket), and exits. The shim, a child subreaper, inherits the
// process, waits for it and exits as it did (128+N for signal N), which is
// what the daemon expects of an attached runc. It exits 255 when the
// runtime could not start the process; the runtime's log says why.
func Exec(argv []string) int {
	if len(argv) == 0 {
		return execFailed(errors.New("exec shim: no runtime command"))
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return execFailed(errors.New("exec shim: become child subreaper: " + err.Error()))
	}
	pidFile := flagValue(argv, "--pid-file")
	if pidFile == "" {
		return execFailed(errors.New("exec shim: the runtime command has no --pid-file"))
	}
	path, err := lookPath(argv[0])
	if err != nil {
		return execFailed(err)
	}
	runtimePID, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2, 3, execLogFD},
	})
	if err != nil {
		return execFailed(errors.New("exec shim: run " + path + ": " + err.Error()))
	}
	if _, status, err := wait4(runtimePID, 0); err != nil || !status.Exited() || status.ExitStatus() != 0 {
		return 255 // the runtime logged why
	}
	pid, err := readPIDFile(pidFile)
	if err != nil {
		return execFailed(err)
	}
	_, status, err := wait4(pid, 0)
	if err != nil {
		return execFailed(errors.New("exec shim: wait for the process: " + err.Error()))
	}
	reapAll()
	if status.Signaled() {
		return 128 + int(status.Signal())
	}
	return status.ExitStatus()
}

// flagValue is the value of the first "name value" or "name=value" in argv.
func flagValue(argv []string, name string) string {
	for i, a := range argv {
		if a == name && i+1 < len(argv) {
			return argv[i+1]
		}
		if len(a) > len(name) && a[:len(name)+1] == name+"=" {
			return a[len(name)+1:]
		}
	}
	return ""
}

// execFailed writes err to the runtime's log, in the runtime's JSON
// format, and returns the runtime's exit code for a process not started.
func execFailed(err error) int {
	writeAll(execLogFD, []byte(`{"level":"error","msg":`+strconv.Quote(err.Error())+"}\n"))
	return 255
}
