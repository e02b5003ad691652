package lifecycle

import (
	"context"

	"go.opentelemetry.io/otel/attribute"

	"github.com/minicri/minicri/internal/tracing"
)

// StepOf names one ordered step of a lifecycle call (RunPodSandbox,
// CreateContainer, StartContainer …) for what watches it from outside:
// the metric phase its time counts to, the span it runs under, if any, and
// the crash point right after it, where the start-up repair is tested.
type StepOf struct {
	Phase string // phases.go
	Crash string // crashpoint.go; "" for none
	Span  string // "" for none
	Attrs []attribute.KeyValue
}

// Step runs fn as the step st names, so that a handler reads as its steps
// and nothing else. The step's time counts to its phase whether fn failed
// or not; the daemon may die at the crash point only once fn did its work.
func Step(ctx context.Context, st StepOf, fn func(ctx context.Context) error) error {
	var err error
	if st.Span != "" {
		spanCtx, span := tracing.Start(ctx, st.Span, st.Attrs...)
		err = fn(spanCtx)
		tracing.End(span, err)
	} else {
		err = fn(ctx)
	}
	PhaseDone(ctx, st.Phase)
	if err != nil {
		return err
	}
	CrashPoint(st.Crash)
	return nil
}
