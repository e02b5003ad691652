package server

import (
	"context"
	"sync"
	"time"

	"github.com/minicri/minicri/metrics"
)

// phaseTimer splits one call's time into its phases for the metric
// minicri_operation_phase_duration_seconds, which `make bench` reads to show
// where a pod's start or stop goes (CNI, runtime, monitor, records). A phase
// named twice (the record written after each step) adds up. A nil timer,
// and one of a daemon without metrics, does nothing.
//
// A call's steps may run at once (eachContainer removes a pod's containers
// side by side), so marks come from several goroutines: each takes the time
// since the last mark of any of them, and the phases still add up to the
// call's wall time.
type phaseTimer struct {
	mu    sync.Mutex
	m     *metrics.Metrics
	op    string
	last  time.Time
	spent map[string]time.Duration
	order []string
}

// withPhases starts timing the phases of op; the steps below the handler
// mark theirs through the context, so that helpers shared by several calls
// (releaseSandboxResources) need no extra parameter.
func (s *Server) withPhases(ctx context.Context, op string) (context.Context, *phaseTimer) {
	if s.metrics == nil {
		return ctx, nil
	}
	p := &phaseTimer{m: s.metrics, op: op, last: time.Now(), spent: map[string]time.Duration{}}
	return context.WithValue(ctx, phaseKey{}, p), p
}

type phaseKey struct{}

// phaseDone ends the current phase of the call's timer, if it has one.
func phaseDone(ctx context.Context, phase string) {
	p, _ := ctx.Value(phaseKey{}).(*phaseTimer)
	p.done(phase)
}

// done ends the current phase, naming it: the time since the last mark.
func (p *phaseTimer) done(phase string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if _, ok := p.spent[phase]; !ok {
		p.order = append(p.order, phase)
	}
	p.spent[phase] += now.Sub(p.last)
	p.last = now
}

// observe records the phases; the rest of the call since the last mark
// counts as "other".
func (p *phaseTimer) observe() {
	if p == nil {
		return
	}
	p.done("other")
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, name := range p.order {
		p.m.ObservePhase(p.op, name, p.spent[name])
	}
}
