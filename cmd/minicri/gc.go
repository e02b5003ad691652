package main

import (
	"math"
	"os"
	"runtime/debug"
	"time"
)

// defaultGCPercent is the collector's target for the serving daemon when
// the environment sets no GOGC: a new cycle when the heap has grown by
// half of what the last one left live, instead of Go's doubling. The
// daemon's live heap is small, so a cycle is cheap, and the doubling's
// headroom, with the free pages the runtime keeps for it, would be a large
// part of its memory. GOGC=100 (or any GOGC, or GOMEMLIMIT with GOGC=off)
// in the daemon's environment overrides it.
const defaultGCPercent = 50

// The start collects nothing: reading a node's records and watching its
// containers again allocates memory that the daemon mostly keeps, so
// cycles then would find little garbage and take CPU from the recovery.
// startMemoryLimit bounds it meanwhile (the collector runs when the
// daemon's Go memory reaches it: a pull in the first second collects, a
// node's start does not), and gcSettleDelay after the daemon serves, past
// a restart's first calls, the serving target applies.
const (
	startMemoryLimit = 32 << 20
	gcSettleDelay    = time.Second
)

// tuneGC turns the collection off for the start and returns what puts the
// serving target in force. An operator's GOGC or GOMEMLIMIT is left
// alone, start included: the first is the target from the first line,
// the second the bound it sets is theirs.
func tuneGC() (settle func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	serving := func() { debug.SetGCPercent(defaultGCPercent) }
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
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
