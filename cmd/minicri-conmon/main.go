// Command minicri-conmon is the monitor minicri starts beside each container.
// It runs the OCI runtime's create, holds the container's stdio, writes the
// CRI log, serves attach and control sockets in its socket directory, reaps
// the container and writes its exit file, then exits. See docs/monitor.md.
//
//	minicri-conmon --id ID --bundle DIR --runtime runc --exit-file FILE --socket-dir DIR [flags]
//	minicri-conmon --id ID ... --join-dir DIR   (shared: further containers join on DIR/join)
//	minicri-conmon exec RUNTIME ... exec --detach --pid-file FILE ... ID   (the daemon's exec shim)
//
// It is started by the daemon with a sync pipe as fd 3, on which it reports
// "created CONTAINER_PID MONITOR_PID" or "failed MESSAGE". It is built with
// CGO_ENABLED=0 and -ldflags='-s -w', and uses no package heavier than os.

// The runtime would keep two cgroup files open and a goroutine to follow the
// container's CPU limit with GOMAXPROCS; the monitor runs on one P anyway.
//
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0
package main

import (
	"os"

	"github.com/minicri/minicri/conmon/monitor"
	"github.com/minicri/minicri/conmon/wire"
)

const usage = `usage: minicri-conmon --id ID --bundle DIR --runtime PATH --exit-file FILE --socket-dir DIR
         [--runtime-root DIR] [--runtime-arg ARG]... [--log-path FILE] [--log-max-line BYTES]
         [--terminal] [--stdin [--stdin-once]] [--join-dir DIR]
`

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == monitor.ExecCommand {
		// The daemon's exec shim: its fds 0-4 are the exec's.
		os.Exit(monitor.Exec(args[1:]))
	}
	if len(args) > 0 && args[0] == monitor.JoinCommand {
		// Started by a shared monitor for one further container.
		os.Exit(monitor.Join(args[1:]))
	}
	syncFD := monitor.SyncFD()
	monitor.CloseInheritedFDs(syncFD)
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		os.Stderr.WriteString(usage)
		os.Exit(2)
	}
	cfg, err := wire.ParseArgs(args)
	if err != nil {
		monitor.Report(syncFD, wire.FailedMessage("minicri-conmon: "+err.Error()))
		os.Exit(2)
	}
	os.Exit(monitor.Run(cfg, syncFD))
}
