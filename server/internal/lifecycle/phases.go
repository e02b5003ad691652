package lifecycle

import (
	"context"
	"sync"
	"time"

	"github.com/minicri/minicri/metrics"
)

// PhaseTimer splits one call's time into its phases for the metric
// minicri_operation_phase_duration_seconds, which `make bench` reads to show
// where a pod's start or stop goes (CNI, runtime, monitor, records). A phase
// named twice (the record written after each step) adds up. A nil timer,
// and one of a daemon without metrics, does nothing.
//
// A call's steps may run at once (eachContainer removes a pod's containers
// side by side), so marks come from several goroutines: each takes the time
// since the last mark of any of them, and the phases still add up to the
// call's wall time.
type PhaseTimer struct {
	mu    sync.Mutex
	m     *metrics.Metrics
	op    string
	last  time.Time
	spent map[string]time.Duration
	order []string
}

// WithPhases starts timing the phases of op into m (nil: not collected);
// the steps below the handler mark theirs through the context, so that
// helpers shared by several calls (releaseSandboxResources) need no extra
// parameter.
func WithPhases(ctx context.Context, m *metrics.Metrics, op string) (context.Context, *PhaseTimer) {
	if m == nil {
		return ctx, nil
	}
	p := &PhaseTimer{m: m, op: op, last: time.Now(), spent: map[string]time.Duration{}}
	return context.WithValue(ctx, phaseKey{}, p), p
}

type phaseKey struct{}

// PhaseDone ends the current phase of the call's timer, if it has one.
func PhaseDone(ctx context.Context, phase string) {
	p, _ := ctx.Value(phaseKey{}).(*PhaseTimer)
	p.Done(phase)
}

// Done ends the current phase, naming it: the time since the last mark.
func (p *PhaseTimer) Done(phase string) {
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

// Observe records the phases; the rest of the call since the last mark
// counts as "other".
func (p *PhaseTimer) Observe() {
	if p == nil {
		return
	}
	p.Done("other")
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, name := range p.order {
		p.m.ObservePhase(p.op, name, p.spent[name])
	}
}
