package monitor

import (
	"errors"
	"strconv"
	"strings"

	"github.com/minicri/minicri/conmon/wire"
)

// handedFDs are the descriptors a join helper hands over to the shared
// monitor, in the order it sends them: one pty master serves as stdout
// and stdin.
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
