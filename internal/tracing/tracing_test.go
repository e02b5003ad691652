package tracing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Off, a span costs nothing: the paths that start one (every runtime call,
// CNI ADD, pull) pay no allocation for it.
func TestOffAllocatesNothing(t *testing.T) {
	Use(nil)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		_, span := Start(ctx, "runtime.kill", ContainerID.String("c1"), Handler.String("runc"))
		End(span, nil)
	})
	if allocs != 0 {
		t.Fatalf("Start and End with tracing off allocate %v times, want 0", allocs)
	}
}

func TestSpansAreChildrenOfTheCallersSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	Use(tp)
	t.Cleanup(func() { Use(nil) })

	// No span in the context: no trace of its own.
	_, orphan := Start(context.Background(), "runtime.state", ContainerID.String("c0"))
	End(orphan, nil)

	ctx, call := tp.Tracer("test").Start(context.Background(), "runtime.v1.RuntimeService/StopContainer")
	_, span := Start(ctx, "runtime.kill", ContainerID.String("c1"))
	End(span, errors.New(`exec: "/TOKCMD-db-password=hunter2": no such file`))
	call.End()

	ended := rec.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans ended, want the call's and its child's: %v", len(ended), ended)
	}
	child := ended[0]
	if child.Name() != "runtime.kill" || child.Parent().SpanID() != call.SpanContext().SpanID() {
		t.Fatalf("span %q has parent %s, want runtime.kill under the call's %s", child.Name(), child.Parent().SpanID(), call.SpanContext().SpanID())
	}
	if got := child.Attributes(); len(got) != 1 || got[0] != ContainerID.String("c1") {
		t.Fatalf("attributes %v, want the container ID", got)
	}
	if child.Status().Code != codes.Error || child.Status().Description != "failed" {
		t.Fatalf("status %+v, want Error with the fixed word, never the error's text (it quotes argv[0])", child.Status())
	}
	if len(child.Events()) != 0 {
		t.Fatalf("events %v, want none (an error is the status, no more)", child.Events())
	}
}

// A span's status says a fixed word of any error: the call's deadline or
// cancelation, or a failure; never the error's text.
func TestEndSaysFixedWords(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("pull registry.local/secret-name: %w", context.DeadlineExceeded), "deadline exceeded"},
		{fmt.Errorf("runc exec /secret: %w", context.Canceled), "canceled"},
		{errors.New(strings.Repeat("secret ", 1<<10)), "failed"},
	} {
		_, span := tp.Tracer("test").Start(context.Background(), "runtime.start")
		End(span, tc.err)
		ended := rec.Ended()
		if got := ended[len(ended)-1].Status(); got.Code != codes.Error || got.Description != tc.want {
			t.Errorf("status of %.40q = %+v, want Error %q", tc.err, got, tc.want)
		}
	}
}
