package monitor

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon/wire"
	"github.com/minicri/minicri/oci/runcflags"
)

// stdio is what the runtime's create gets as its fds 0, 1 and 2. Without a
// tty the container inherits them; with one the container gets the pty and
// these only carry the runtime's own messages.
type stdio struct {
	child   [3]int // the runtime's stdio
	own     []int  // of child, the fds to close once the runtime ran
	errRead int    // where the runtime's error message can be read
	console int    // the listening console socket, -1 without a tty
}

// prepareStdio makes the pipes, or for a tty the console socket over which
// runc sends the pty master while it creates the container.
func (m *monitor) prepareStdio(u *undo) (*stdio, error) {
	null, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, errors.New("open /dev/null: " + err.Error())
	}
	io := &stdio{child: [3]int{null, null, null}, own: []int{null}, console: -1}
	if m.cfg.Terminal {
		return io, m.prepareTerminal(io, u)
	}
	if m.cfg.Stdin {
		r, w, err := pipe()
		if err != nil {
			return nil, err
		}
		io.child[0], m.stdin = r, w
		io.own = append(io.own, r)
	}
	for i, o := range []*output{&m.stdout, &m.stderr} {
		r, w, err := pipe()
		if err != nil {
			return nil, err
		}
		io.child[i+1], o.fd = w, r
		io.own = append(io.own, w)
	}
	io.errRead = m.stderr.fd
	return io, nil
}

func (m *monitor) prepareTerminal(io *stdio, u *undo) error {
	r, w, err := pipe()
	if err != nil {
		return err
	}
	io.child[1], io.child[2], io.errRead = w, w, r
	io.own = append(io.own, w)
	if io.console, err = listenUnix(wire.ConsoleSocket, unix.SOCK_STREAM, 1); err != nil {
		return err
	}
	u.add(func() { unix.Unlink(wire.ConsoleSocket) })
	return nil
}

func pipe() (r, w int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, -1, errors.New("pipe: " + err.Error())
	}
	return p[0], p[1], nil
}

// runCreate runs "runtime create" and waits for it: it returns once the
// container's init waits for "runtime start", which the daemon runs.
func (m *monitor) runCreate(io *stdio) error {
	// runc's warnings would otherwise land in the container's stderr.
	args := append(m.runtimeArgs(m.cfg.SocketDir+"/"+wire.RuntimeLog),
		"create", "--bundle", m.cfg.Bundle, "--pid-file", m.cfg.SocketDir+"/"+wire.PIDFile)
	if io.console >= 0 {
		path, err := consoleSocketPath(m.cfg.SocketDir)
		if err != nil {
			return err
		}
		args = append(args, "--console-socket", path)
	}
	args = append(args, m.cfg.ID)
	status, err := m.runCreateRuntime(args, io.child)
	// The container holds the child ends now; the monitor must not, or it
	// would never see the end of the container's output.
	for _, fd := range io.own {
		unix.Close(fd)
	}
	if err != nil {
		return err
	}
	if status.Exited() && status.ExitStatus() == 0 {
		return nil
	}
	msg := readAvailable(io.errRead)
	m.deleteContainer()
	if msg == "" {
		msg = m.cfg.Runtime + " create: " + describe(status)
	}
	return errors.New(msg)
}

// consoleSocketPath is the path runc dials to send the pty master. runc
// needs an absolute one (it works from the bundle), and sun_path holds 107
// bytes: a longer socket directory is reached through a descriptor the
// monitor holds, /proc/PID/fd/N/console, which runc may follow as root.
// The descriptor is left open; the handover closes it with the rest.
func consoleSocketPath(socketDir string) (string, error) {
	path := socketDir + "/" + wire.ConsoleSocket
	if len(path) <= wire.MaxSocketPath {
		return path, nil
	}
	dir, err := unix.Open(socketDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", errors.New("console socket: " + err.Error())
	}
	return "/proc/" + strconv.Itoa(unix.Getpid()) + "/fd/" + strconv.Itoa(dir) + "/" + wire.ConsoleSocket, nil
}

// runtimeArgs is the runtime's argv up to the subcommand; logPath adds
// --log, which keeps runc's warnings out of the container's stderr.
func (m *monitor) runtimeArgs(logPath string) []string {
	g := runcflags.Global{Root: m.cfg.RuntimeRoot, Extra: m.cfg.RuntimeArgs, Log: logPath}
	return append([]string{m.cfg.Runtime}, g.Args()...)
}

// runRuntime runs the runtime in the monitor's process group, so that the
// daemon's deadline, which kills that group, reaches it too.
func (m *monitor) runRuntime(argv []string, files [3]int) (unix.WaitStatus, error) {
	path, err := lookPath(argv[0])
	if err != nil {
		return 0, err
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   runtimeEnv(),
		Files: []uintptr{uintptr(files[0]), uintptr(files[1]), uintptr(files[2])},
	})
	if err != nil {
		return 0, errors.New("run " + path + ": " + err.Error())
	}
	_, status, err := wait4(pid, 0)
	if err != nil {
		return 0, errors.New("wait for " + path + ": " + err.Error())
	}
	return status, nil
}

// runtimeEnv is the monitor's environment without the monitor's own Go
// tuning, which is no business of runc's.
func runtimeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") {
			env = append(env, kv)
		}
	}
	return env
}

// deleteContainer removes whatever state the runtime kept of a container
// whose creation failed, so that nothing is left behind.
func (m *monitor) deleteContainer() {
	null, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(null)
	m.runRuntime(append(m.runtimeArgs(""), "delete", "--force", m.cfg.ID), [3]int{null, null, null})
}

func lookPath(file string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	for _, dir := range strings.Split(os.Getenv("PATH"), ":") {
		if dir == "" {
			dir = "."
		}
		path := dir + "/" + file
		if unix.Access(path, unix.X_OK) == nil {
			return path, nil
		}
	}
	return "", errors.New("runtime " + file + " not found in $PATH")
}

// readAvailable reads what a pipe holds without waiting for more: after a
// failed create that is the runtime's error message.
func readAvailable(fd int) string {
	unix.SetNonblock(fd, true)
	var b []byte
	buf := make([]byte, 4096)
	for len(b) < 64*1024 {
		n, err := unix.Read(fd, buf)
		if n <= 0 || err != nil {
			break
		}
		b = append(b, buf[:n]...)
	}
	return strings.TrimSpace(string(b))
}

func describe(status unix.WaitStatus) string {
	if status.Signaled() {
		return "killed by signal " + strconv.Itoa(int(status.Signal()))
	}
	return "exit status " + strconv.Itoa(status.ExitStatus())
}

// afterCreate collects what the create produced: the container's pid, the
// pty master, the memory cgroup whose OOM kills explain a death.
func (m *monitor) afterCreate(io *stdio) error {
	pid, err := readPIDFile(wire.PIDFile)
	if err != nil {
		return err
	}
	m.containerPID = pid
	if io.console >= 0 {
		master, err := receiveConsole(io.console)
		unix.Close(io.console)
		unix.Unlink(wire.ConsoleSocket)
		if err != nil {
			return err
		}
		m.stdout.fd = master
		if m.cfg.Stdin {
			m.stdin = master
		}
	}
	if io.errRead != m.stderr.fd { // with a tty, a pipe for the runtime alone
		unix.Close(io.errRead)
	}
	m.oom = newOOMCounter(pid)
	m.sharedPIDNS = samePIDNamespace(pid)
	return nil
}

func samePIDNamespace(pid int) bool {
	var self, other unix.Stat_t
	return unix.Stat("/proc/self/ns/pid", &self) == nil &&
		unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/pid", &other) == nil &&
		self.Ino == other.Ino && self.Dev == other.Dev
}

func readPIDFile(path string) (int, error) {
	b, err := readFile(path)
	if err != nil {
		return 0, errors.New("container pid: " + err.Error())
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, errors.New("container pid: malformed pid file " + strconv.Quote(string(b)))
	}
	return pid, nil
}

// receiveConsole takes the pty master that runc sent while creating the
// container. The connection is queued on the socket by the time create
// returned; the bounded wait only covers a runtime that never connected.
func receiveConsole(listener int) (int, error) {
	fds := []unix.PollFd{{Fd: int32(listener), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 1000)
		if err == unix.EINTR {
			continue
		}
		if n == 0 || err != nil {
			return -1, errors.New("console socket: the runtime sent no pty master")
		}
		break
	}
	conn, _, err := unix.Accept4(listener, unix.SOCK_CLOEXEC)
	if err != nil {
		return -1, errors.New("console socket: " + err.Error())
	}
	defer unix.Close(conn)
	return receiveFD(conn)
}

func receiveFD(conn int) (int, error) {
	buf := make([]byte, 4096) // runc sends the pty's name along
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(conn, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return -1, errors.New("console socket: " + err.Error())
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, errors.New("console socket: no descriptor in the message")
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return -1, errors.New("console socket: no descriptor in the message")
	}
	return fds[0], nil
}
