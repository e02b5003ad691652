// Package conmon is the daemon's side of the container monitor: it starts
// minicri-conmon for a container (Create), watches it (WatchMonitor, Alive),
// reads what it leaves when the container exits (ReadExit), and talks to it
// over its sockets (ReopenLog, Attach).
//
// The monitor itself is conmon/monitor and cmd/minicri-conmon; conmon/wire
// is the protocol both sides share. See docs/monitor.md.
package conmon

import (
	"errors"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/minicri/minicri/conmon/wire"
)

// BinaryName is the monitor's executable, looked up in $PATH when
// Options.Binary is empty.
const BinaryName = "minicri-conmon"

// DefaultCreateTimeout bounds Create when its context has no deadline.
const DefaultCreateTimeout = 60 * time.Second

var (
	// ErrCreateFailed wraps the runtime's own error when its create failed.
	ErrCreateFailed = wire.ErrCreateFailed
	// ErrNotRunning means the monitor's sockets are gone: the container has
	// exited (its exit file says how), or was never created.
	ErrNotRunning = errors.New("container monitor not running")
)

// Options describe one container's monitor.
type Options struct {
	ID          string   // container ID, as the OCI runtime knows it
	Bundle      string   // OCI bundle directory
	Runtime     string   // OCI runtime binary, "runc" when empty
	RuntimeRoot string   // the runtime's --root; empty for its default
	RuntimeArgs []string // further global runtime flags (e.g. --systemd-cgroup)
	LogPath     string   // CRI log file; empty discards the output
	LogMaxLine  int      // longest log entry before a split into P parts; 0 for 16 KiB
	ExitFile    string   // where the monitor writes the exit status
	SocketDir   string   // the monitor's directory: attach and control sockets, pid file
	Terminal    bool     // give the container a pty
	Stdin       bool     // keep the container's stdin open for attach
	StdinOnce   bool     // close stdin when the first attach session that used it ends
	Binary      string   // path to minicri-conmon; BinaryName in $PATH when empty
	// JoinDir makes the monitor Create starts a shared one: further
	// containers join it there (Join). The directory is the monitor's; it
	// removes it when it exits. Empty: a monitor for this container only.
	JoinDir string
	// Rootfs and RootfsStage: the runtime's create finds the container's
	// root filesystem Rootfs on RootfsStage, the bundle's root.path, in a
	// mount namespace of its own (wire.Config). Both empty: root.path is
	// the root filesystem.
	Rootfs, RootfsStage string
	// SysStage: where the host's /sys is bound read-only in that mount
	// namespace, for a user-namespaced container on the host's network
	// (wire.Config). Empty: no such bind.
	SysStage string
}

// Created is what Create reports about a running monitor. Keep all three:
// after a daemon restart, MonitorPID and MonitorStartTime find the same
// monitor again (a pid alone may have been reused).
type Created struct {
	MonitorPID       int
	ContainerPID     int
	MonitorStartTime uint64 // field 22 of /proc/PID/stat, in clock ticks since boot
}

// Size is a terminal size for Attach.
type Size struct {
	Rows, Cols uint16
}

// Exit is a container's end as its monitor recorded it.
type Exit struct {
	Code   int       // exit code; 128+n for a death by signal n
	At     time.Time // when the monitor reaped the container
	Reason string    // "OOMKilled" when the memory cgroup saw an OOM kill, else empty
}

// config turns the options into the monitor's command line, with the
// defaults filled in and every path made absolute: the monitor runs in its
// socket directory.
func (o Options) config() (wire.Config, error) {
	c := wire.Config{
		ID: o.ID, Runtime: o.Runtime, RuntimeRoot: o.RuntimeRoot, RuntimeArgs: o.RuntimeArgs,
		LogMaxLine: o.LogMaxLine, Terminal: o.Terminal, Stdin: o.Stdin, StdinOnce: o.StdinOnce,
	}
	if c.Runtime == "" {
		c.Runtime = "runc"
	}
	for _, p := range []struct {
		dst *string
		src string
	}{
		{&c.Bundle, o.Bundle}, {&c.ExitFile, o.ExitFile}, {&c.SocketDir, o.SocketDir},
		{&c.LogPath, o.LogPath}, {&c.RuntimeRoot, o.RuntimeRoot}, {&c.JoinDir, o.JoinDir},
		{&c.Rootfs, o.Rootfs}, {&c.RootfsStage, o.RootfsStage}, {&c.SysStage, o.SysStage},
	} {
		if p.src == "" {
			continue
		}
		abs, err := filepath.Abs(p.src)
		if err != nil {
			return c, err
		}
		*p.dst = abs
	}
	return c, c.Validate()
}

func (o Options) binary() (string, error) {
	if o.Binary != "" {
		return o.Binary, nil
	}
	return exec.LookPath(BinaryName)
}
