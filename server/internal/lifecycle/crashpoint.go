//go:build crashpoints

package lifecycle

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// CrashEnv names the environment variable that makes the daemon kill itself
// with SIGKILL at one named step of an RPC. The start-up repair is tested by
// cutting RunPodSandbox, CreateContainer, StartContainer, StopContainer,
// RemoveContainer or RemovePodSandbox at a known step, instead of racing a
// timer against them.
//
// Only binaries built with -tags crashpoints (the e2e suite's, see the
// Makefile) have crash points; the shipped ones have crashpoint_off.go,
// where no environment variable can kill the daemon.
const CrashEnv = "MINICRI_TEST_CRASH_AT"

// CrashPointsBuiltIn tells the tests which build this is.
const CrashPointsBuiltIn = true

// crashAt is read once: the points sit on hot paths.
var crashAt = os.Getenv(CrashEnv)

// CrashPoint kills the daemon, as kill -9 would, when CrashEnv names point.
// The line on stderr lets a test check that the daemon died where it meant.
func CrashPoint(point string) {
	if crashAt == "" || crashAt != point {
		return
	}
	fmt.Fprintf(os.Stderr, "crash point %s: killing the daemon\n", point)
	_ = unix.Kill(os.Getpid(), unix.SIGKILL)
	for {
		time.Sleep(time.Second) // SIGKILL cannot be caught; it lands at once
	}
}
