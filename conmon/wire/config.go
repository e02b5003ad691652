// Package wire is what the daemon and the monitor (minicri-conmon) agree on:
// the monitor's command line, the names of the files it keeps in its socket
// directory, the messages on its sync pipe and sockets, and the exit file.
//
// It is imported by the monitor binary, which must stay small, so it uses
// only strconv, time and errors: no fmt, no reflection.
package wire

import (
	"errors"
	"strconv"
	"strings"
)

// DefaultLogMaxLine is the longest log line written as one "F" entry; longer
// lines are split into "P" parts. The kubelet and containerd use 16 KiB too.
const DefaultLogMaxLine = 16 * 1024

// MaxSocketPath is what fits in sockaddr_un's sun_path with its NUL.
const MaxSocketPath = 107

// SyncFD is the descriptor number on which the monitor finds its sync pipe:
// the daemon passes it as the first extra file.
const SyncFD = 3

// HandoverFD is where a join helper finds its socket back to the shared
// monitor, on which it hands the container over (see JoinSocket).
const HandoverFD = 4

// Config is the monitor's command line.
type Config struct {
	ID          string   // container ID, as the OCI runtime knows it
	Bundle      string   // OCI bundle directory
	Runtime     string   // OCI runtime binary (runc, crun)
	RuntimeRoot string   // the runtime's --root; empty for its default
	RuntimeArgs []string // global runtime flags, placed before "create"
	LogPath     string   // CRI log file; empty discards the output
	LogMaxLine  int      // see DefaultLogMaxLine; 0 means the default
	ExitFile    string   // where the exit status is written when the container exits
	SocketDir   string   // directory for the attach and control sockets
	Terminal    bool     // container has a pty
	Stdin       bool     // container's stdin is kept open for attach
	StdinOnce   bool     // stdin is closed when the first attach session with stdin ends
	// JoinDir is where a new monitor listens for further containers
	// (JoinSocket); empty, it serves this one container only. A join
	// request ignores it.
	JoinDir string
	// Rootfs, when set, is the container's root filesystem on the host,
	// which the bundle's root.path (RootfsStage) does not name: the
	// runtime's create runs in a mount namespace of its own in which
	// Rootfs is bind-mounted on RootfsStage, an empty directory of the
	// host. A user-namespaced container's runtime resolves root.path as
	// the pod's root, who can search no directory of the state root; the
	// stage is reached through world-searchable directories, and on the
	// host it is empty (docs/security.md).
	Rootfs, RootfsStage string
	// SysStage, when set (only beside Rootfs), is an empty directory of
	// the host on which the host's /sys is bound, alone and read-only, in
	// that same mount namespace: the bundle's /sys of a user-namespaced
	// container on the host's network. Made in a namespace of the initial
	// user namespace, the bind arrives in the container's locked: its
	// root can neither make it writable nor find the host's mounts below
	// /sys under it (docs/security.md).
	SysStage string
}

// Args renders c as minicri-conmon's command line (without the program name).
func (c Config) Args() []string {
	var args []string
	for _, f := range stringFlags {
		if v := *c.stringField(f.name); f.required || v != "" {
			args = append(args, f.name, v)
		}
	}
	for _, a := range c.RuntimeArgs {
		// "=" keeps an argument that starts with "--" from being read as a flag.
		args = append(args, "--runtime-arg="+a)
	}
	if c.LogMaxLine != 0 {
		args = append(args, "--log-max-line", strconv.Itoa(c.LogMaxLine))
	}
	for _, name := range boolFlags {
		if *c.boolFlag(name) {
			args = append(args, name)
		}
	}
	return args
}

// ParseArgs reads a command line written by Args.
func ParseArgs(args []string) (Config, error) {
	var c Config
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		if b := c.boolFlag(name); b != nil {
			if hasValue {
				return c, errors.New("flag " + name + " takes no value")
			}
			*b = true
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return c, errors.New("flag " + name + " needs a value")
			}
			i++
			value = args[i]
		}
		if err := c.setFlag(name, value); err != nil {
			return c, err
		}
	}
	if c.LogMaxLine == 0 {
		c.LogMaxLine = DefaultLogMaxLine
	}
	return c, c.Validate()
}

// stringFlags is the one table of the string flags that Args renders and
// setFlag reads, so that the two cannot drift apart; stringField maps each
// name to its field. An optional flag is left out of Args when its field is
// empty. A fixed table and a switch, not a slice of field pointers made per
// call: a shared monitor parses two command lines for every container that
// joins it, and with its collector off each such slice stayed on its heap.
var stringFlags = [...]struct {
	name     string
	required bool
}{
	{"--id", true},
	{"--bundle", true},
	{"--runtime", true},
	{"--exit-file", true},
	{"--socket-dir", true},
	{"--runtime-root", false},
	{"--log-path", false},
	{"--join-dir", false},
	{"--rootfs", false},
	{"--rootfs-stage", false},
	{"--sys-stage", false},
}

func (c *Config) stringField(name string) *string {
	switch name {
	case "--id":
		return &c.ID
	case "--bundle":
		return &c.Bundle
	case "--runtime":
		return &c.Runtime
	case "--exit-file":
		return &c.ExitFile
	case "--socket-dir":
		return &c.SocketDir
	case "--runtime-root":
		return &c.RuntimeRoot
	case "--log-path":
		return &c.LogPath
	case "--join-dir":
		return &c.JoinDir
	case "--rootfs":
		return &c.Rootfs
	case "--rootfs-stage":
		return &c.RootfsStage
	case "--sys-stage":
		return &c.SysStage
	}
	return nil
}

var boolFlags = [...]string{"--terminal", "--stdin", "--stdin-once"}

func (c *Config) boolFlag(name string) *bool {
	switch name {
	case "--terminal":
		return &c.Terminal
	case "--stdin":
		return &c.Stdin
	case "--stdin-once":
		return &c.StdinOnce
	}
	return nil
}

func (c *Config) setFlag(name, value string) error {
	if field := c.stringField(name); field != nil {
		*field = value
		return nil
	}
	switch name {
	case "--runtime-arg":
		c.RuntimeArgs = append(c.RuntimeArgs, value)
	case "--log-max-line":
		n, err := strconv.Atoi(value)
		if err != nil || n <= 0 {
			return errors.New("--log-max-line: not a positive number: " + value)
		}
		c.LogMaxLine = n
	default:
		return errors.New("unknown flag " + name)
	}
	return nil
}

// Validate reports the first missing or malformed field.
func (c Config) Validate() error {
	switch {
	case c.ID == "" || strings.ContainsAny(c.ID, "/\x00") || c.ID == "." || c.ID == "..":
		return errors.New("id: empty or not a plain name: " + strconv.Quote(c.ID))
	case c.Runtime == "":
		return errors.New("runtime: empty")
	case !isAbs(c.Bundle):
		return errors.New("bundle: not an absolute path: " + strconv.Quote(c.Bundle))
	case !isAbs(c.ExitFile):
		return errors.New("exit file: not an absolute path: " + strconv.Quote(c.ExitFile))
	case !isAbs(c.SocketDir):
		return errors.New("socket dir: not an absolute path: " + strconv.Quote(c.SocketDir))
	case c.JoinDir != "" && !isAbs(c.JoinDir):
		return errors.New("join dir: not an absolute path: " + strconv.Quote(c.JoinDir))
	case c.LogPath != "" && !isAbs(c.LogPath):
		return errors.New("log path: not an absolute path: " + strconv.Quote(c.LogPath))
	case (c.Rootfs == "") != (c.RootfsStage == "") || c.Rootfs != "" && (!isAbs(c.Rootfs) || !isAbs(c.RootfsStage)):
		return errors.New("rootfs and rootfs stage: both absolute paths, or neither: " + strconv.Quote(c.Rootfs) + ", " + strconv.Quote(c.RootfsStage))
	case c.SysStage != "" && (c.Rootfs == "" || !isAbs(c.SysStage)):
		return errors.New("sys stage: an absolute path, and only with a rootfs stage: " + strconv.Quote(c.SysStage))
	case c.LogMaxLine < 0:
		return errors.New("log max line: negative")
	case c.StdinOnce && !c.Stdin:
		return errors.New("stdin once: set without stdin")
	}
	return nil
}

// isAbs wants absolute paths because the monitor works from its socket
// directory, where a relative path would mean something else.
func isAbs(path string) bool { return strings.HasPrefix(path, "/") }
