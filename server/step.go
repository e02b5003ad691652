package server

import (
	"context"

	"go.opentelemetry.io/otel/attribute"

	"github.com/minicri/minicri/internal/tracing"
)

// stepOf names one ordered step of a lifecycle call (RunPodSandbox,
// CreateContainer, StartContainer …) for what watches it from outside:
// the metric phase its time counts to, the span it runs under, if any, and
// the crash point right after it, where the start-up repair is tested.
type stepOf struct {
	phase string // phases.go
	crash string // crashpoint.go; "" for none
	span  string // "" for none
	attrs []attribute.KeyValue
}

// step runs fn as the step st names, so that a handler reads as its steps
// and nothing else. The step's time counts to its phase whether fn failed
// or not; the daemon may die at the crash point only once fn did its work.
func step(ctx context.Context, st stepOf, fn func(ctx context.Context) error) error {
	var err error
	if st.span != "" {
		spanCtx, span := tracing.Start(ctx, st.span, st.attrs...)
		err = fn(spanCtx)
		tracing.End(span, err)
	} else {
		err = fn(ctx)
	}
	phaseDone(ctx, st.phase)
	if err != nil {
		return err
	}
	crashPoint(st.crash)
	return nil
}
