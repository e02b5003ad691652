package main

import (
	"os"
	"runtime/debug"
)

// defaultGCPercent is the collector's target for the serving daemon when
// the environment sets no GOGC: a new cycle when the heap has grown by
// half of what the last one left live, instead of Go's doubling. The
// daemon's live heap is small (3.3 MB at 100 pods), so a cycle is cheap
// and the doubling's headroom, with the free pages the runtime keeps
// for it, was 2 MiB of its PSS (docs/performance.md). GOGC=100 (or any
// GOGC, or GOMEMLIMIT with GOGC=off) in the daemon's environment
// overrides it.
const defaultGCPercent = 50

func tuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
}
