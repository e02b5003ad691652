package stats

import (
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
			var p CPUSample
			for i, s := range tc.steps {
				rate, ok := p.Next(s.at, s.usage)
				if rate != s.rate || ok != s.hasOne {
					t.Fatalf("step %d: rate %d, %v; want %d, %v", i, rate, ok, s.rate, s.hasOne)
				}
			}
		})
	}
}
