package server

import (
	"fmt"
	"testing"
	"time"
)

func TestCPURates(t *testing.T) {
	sec := int64(time.Second)
	type step struct {
		at     int64
		usage  uint64
		rate   uint64
		hasOne bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"first sample has no rate", []step{{sec, 5e8, 0, false}}},
		{"one core for a second", []step{{sec, 0, 0, false}, {2 * sec, 1e9, 1e9, true}}},
		{"half a core over two seconds", []step{{sec, 1e9, 0, false}, {3 * sec, 2e9, 5e8, true}}},
		{"a call within the window keeps the last rate", []step{
			{sec, 0, 0, false}, {2 * sec, 1e9, 1e9, true}, {2*sec + int64(time.Millisecond), 1e9 + 1e6, 1e9, true},
			{3 * sec, 1.5e9, 5e8, true}}},
		{"a counter that went backwards starts over", []step{{sec, 2e9, 0, false}, {2 * sec, 1e9, 0, false}, {3 * sec, 1.25e9, 2.5e8, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r cpuRates
			for i, s := range tc.steps {
				rate, ok := r.nanoCores("c", s.at, s.usage)
				if rate != s.rate || ok != s.hasOne {
					t.Fatalf("step %d: rate %d, %v; want %d, %v", i, rate, ok, s.rate, s.hasOne)
				}
			}
		})
	}
}

func TestCPURatesForgetAndBound(t *testing.T) {
	var r cpuRates
	r.nanoCores("gone", 1, 1)
	r.forget("gone")
	if _, ok := r.lastUsage("gone"); ok {
		t.Fatal("a forgotten sample is still kept")
	}
	start := int64(time.Hour)
	for i := range maxCPUSamples {
		r.nanoCores(fmt.Sprint(i), start, 1)
	}
	// Full: a new one is not kept while nothing is stale...
	r.nanoCores("new", start+1, 1)
	if _, ok := r.lastUsage("new"); ok || len(r.samples) > maxCPUSamples {
		t.Fatalf("cache grew past its bound: %d samples", len(r.samples))
	}
	// ...and stale ones make room.
	r.nanoCores("later", start+staleSample+1, 1)
	if _, ok := r.lastUsage("later"); !ok || len(r.samples) != 1 {
		t.Fatalf("stale samples were not pruned: %d samples", len(r.samples))
	}
}
