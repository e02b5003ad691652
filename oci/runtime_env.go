package oci

import (
	"os"
	"slices"
)

// SystemdHandedEnv are the variables systemd hands the daemon's process
// (sd_notify, socket activation, the watchdog). They are the daemon's alone:
// runc acts on NOTIFY_SOCKET (it binds a socket of its own in the
// container's state dir and relays the container's notifications, and
// under minicri.service's Type=notify that bind fails: 'listen unixgram
// …/notify/notify.sock: bind: invalid argument'), and a child that sees
// LISTEN_PID or WATCHDOG_PID of the daemon may take them as its own.
var SystemdHandedEnv = []string{
	"NOTIFY_SOCKET",
	"LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES",
	"WATCHDOG_USEC", "WATCHDOG_PID",
}

// runtimeEnv is the environment of every runtime command: the daemon's
// without what systemd handed it.
func runtimeEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return slices.Contains(SystemdHandedEnv, envKey(kv))
	})
}
