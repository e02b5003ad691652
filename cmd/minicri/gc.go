package main

import (
	"os"
	"runtime/debug"
)

// defaultGCPercent is the collector's target for the daemon when the
// environment sets no GOGC: a new cycle when the heap has grown by half of
// what the last one left live, instead of Go's doubling. The daemon's live
// heap is small, so a cycle is cheap, and the doubling's headroom, with the
// free pages the runtime keeps for it, would be a large part of its memory.
// GOGC=100 (or any GOGC) in the daemon's environment overrides it;
// GOMEMLIMIT works beside it as Go documents.
const defaultGCPercent = 50

// setGCPercent puts defaultGCPercent in force unless the operator set GOGC.
func setGCPercent() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
}
