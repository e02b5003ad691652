package monitor

import (
	"errors"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/conmon/wire"
)

// ServeCommand is the hidden first argument of the monitor's second image.
const ServeCommand = "serve"

// handOver replaces the image that created the container by a fresh one of
// the same binary, which only serves. Creating costs what serving never
// will: the runtime's command line and environment, a fork, file reads. With
// the collector off that garbage stays resident; a fresh image starts from
// the Go runtime's floor instead, for every container it serves.
// The process stays the same, so the container stays its child and the
// subreaper setting holds. It returns only when the exec failed.
func (m *monitor) handOver() error {
	if err := compactFDs(m.handedFDs()); err != nil {
		return err
	}
	args := append([]string{"minicri-conmon", ServeCommand}, m.handoverArgs()...)
	args = append(args, "--")
	args = append(args, m.cfg.Args()...)
	return unix.Exec("/proc/self/exe", args, serveEnv())
}

// serveEnv is the environment with GOMAXPROCS=1, which must be set before
// the runtime starts: more Ps are only more per-P caches for one goroutine.
func serveEnv() []string {
	env := []string{"GOMAXPROCS=1"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") {
			env = append(env, kv)
		}
	}
	return env
}

// handedFDs are the descriptors the second image takes over, in the order
// they get the numbers 3, 4, ...: one pty master serves as stdout and stdin.
func (m *monitor) handedFDs() []*int {
	return []*int{&m.syncFD, &m.stdout.fd, &m.stderr.fd, &m.stdin, &m.attachFD, &m.controlFD, &m.log.fd}
}

var handoverKeys = []string{"sync", "stdout", "stderr", "stdin", "attach", "control", "log"}

func (m *monitor) handoverArgs() []string {
	var args []string
	for i, fd := range m.handedFDs() {
		args = append(args, handoverKeys[i]+"="+strconv.Itoa(*fd))
	}
	return append(args,
		"pid="+strconv.Itoa(m.containerPID),
		"oom-file="+m.oom.path,
		"oom-start="+strconv.Itoa(m.oom.start),
		"shared-pidns="+strconv.FormatBool(m.sharedPIDNS),
		"log-made="+strconv.FormatBool(m.logMade),
	)
}

// parseHandover rebuilds the monitor from the arguments handoverArgs wrote.
func parseHandover(args []string) (*monitor, error) {
	i := 0
	for i < len(args) && args[i] != "--" {
		i++
	}
	if i == len(args) {
		return nil, errors.New("no -- before the monitor's flags")
	}
	cfg, err := wire.ParseArgs(args[i+1:])
	if err != nil {
		return nil, err
	}
	m := newMonitor(cfg)
	// A lookup in the dozen key=value arguments, not a map of them: a
	// shared monitor parses a handover for every container that joins
	// it, and keeps whatever that allocates.
	value := func(key string) string {
		for _, a := range args[:i] {
			if k, v, _ := strings.Cut(a, "="); k == key {
				return v
			}
		}
		return ""
	}
	for j, fd := range m.handedFDs() {
		if *fd, err = strconv.Atoi(value(handoverKeys[j])); err != nil {
			return nil, errors.New("handover: " + handoverKeys[j] + ": " + err.Error())
		}
	}
	if m.containerPID, err = strconv.Atoi(value("pid")); err != nil || m.containerPID <= 0 {
		return nil, errors.New("handover: bad container pid " + strconv.Quote(value("pid")))
	}
	m.oom.path = value("oom-file")
	m.oom.start, _ = strconv.Atoi(value("oom-start"))
	m.sharedPIDNS = value("shared-pidns") == "true"
	m.logMade = value("log-made") == "true"
	return m, nil
}

// compactFDs moves the descriptors to 3, 4, ... in order, without
// close-on-exec, so that they survive the exec at known numbers; -1 stays
// -1, and a descriptor listed twice gets one number. All go through
// copies above the target range first: a target may hold a source.
func compactFDs(fds []*int) error {
	high := map[int]int{} // source → copy above the targets
	for _, fd := range fds {
		if *fd < 0 || high[*fd] != 0 {
			continue
		}
		c, err := unix.FcntlInt(uintptr(*fd), unix.F_DUPFD_CLOEXEC, 3+len(fds))
		if err != nil {
			return errors.New("handover: dup: " + err.Error())
		}
		high[*fd] = c
	}
	target := map[int]int{} // source → its number from now on
	next := 3
	for _, fd := range fds {
		if *fd < 0 {
			continue
		}
		if t, ok := target[*fd]; ok {
			*fd = t
			continue
		}
		c := high[*fd]
		if err := unix.Dup2(c, next); err != nil { // the copy is not close-on-exec
			return errors.New("handover: dup2: " + err.Error())
		}
		unix.Close(c)
		target[*fd] = next
		*fd = next
		next++
	}
	return nil
}
