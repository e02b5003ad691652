package main

import (
	"math"
	"os"
	"runtime/debug"
	"time"
)

// defaultGCPercent is the collector's target for the daemon when the
// environment sets no GOGC: a new cycle when the heap has grown by half of
// what the last one left live, instead of Go's doubling. The daemon's live
// heap is small, so a cycle is cheap, and the doubling's headroom, with the
// free pages the runtime keeps for it, would be a large part of its memory.
// GOGC=100 (or any GOGC) in the daemon's environment overrides it;
// GOMEMLIMIT works beside it as Go documents.
const defaultGCPercent = 50

// With start_without_gc the start collects nothing until gcSettleDelay
// after the daemon serves, past a restart's first calls; startMemoryLimit
// bounds it meanwhile (a pull in the first second collects, a node's
// start does not).
const (
	startMemoryLimit = 32 << 20
	gcSettleDelay    = time.Second
)

// tuneGC puts defaultGCPercent in force unless the operator set GOGC.
// With startWithoutGC it turns the collector off instead and returns what
// puts the target in force; an operator's GOGC or GOMEMLIMIT turns that
// off, as the bound it sets is theirs.
func tuneGC(startWithoutGC bool) (settle func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	serving := func() { debug.SetGCPercent(defaultGCPercent) }
	if _, set := os.LookupEnv("GOMEMLIMIT"); set || !startWithoutGC {
		serving()
		return func() {}
	}
	debug.SetMemoryLimit(startMemoryLimit)
	debug.SetGCPercent(-1)
	return func() {
		serving()
		debug.SetMemoryLimit(math.MaxInt64)
	}
}
