package monitor

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// Pause is the infra process of a pod that shares one PID namespace among
// its containers: PID 1 there, it reaps the orphans that the namespace's
// processes leave and exits 0 on SIGTERM or SIGINT. As PID 1 it gets only
// the signals it has a handler for, hence the explicit Notify of both.
func Pause() int {
	tuneRuntime()
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGCHLD, unix.SIGTERM, unix.SIGINT)
	// Outside a PID namespace of its own it still adopts the orphans below it.
	unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	reapAll() // children that ended before Notify
	for s := range sigs {
		if s == unix.SIGTERM || s == unix.SIGINT {
			return 0
		}
		reapAll()
	}
	return 0
}
