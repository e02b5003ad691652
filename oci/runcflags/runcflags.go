// Package runcflags spells runc's global options, the flags before the
// subcommand, in one place: the daemon's calls (package oci), the daemon's
// fallback cleanup (package conmon) and the monitor binary all put them in
// front of their subcommands. It imports nothing, because the monitor binary
// links only the standard library and x/sys.
package runcflags

// Global is runc's global options.
type Global struct {
	Root          string // --root: runc's state directory; "" for runc's default
	SystemdCgroup bool   // --systemd-cgroup: cgroups through systemd
	// Extra flags go through as they are: the monitor gets the daemon's
	// (--runtime-arg) already rendered.
	Extra []string
	Log   string // --log: where runc writes its own messages, not to stderr
	// LogJSON adds --log-format json, for a Log the daemon parses.
	LogJSON bool
}

// Args renders g in the order runc's help lists them.
func (g Global) Args() []string {
	var args []string
	if g.Root != "" {
		args = append(args, "--root", g.Root)
	}
	if g.SystemdCgroup {
		args = append(args, "--systemd-cgroup")
	}
	args = append(args, g.Extra...)
	if g.Log != "" {
		args = append(args, "--log", g.Log)
		if g.LogJSON {
			args = append(args, "--log-format", "json")
		}
	}
	return args
}
