// Package tracing is where the packages below server/ start their
// OpenTelemetry spans: the runtime's calls (oci), CNI ADD and DEL
// (network), pulls and unpacks (image). They know no gRPC: a span of theirs
// is a child of the span in the context they are given, which is the CRI
// call's (the daemon's gRPC instrumentation put it there).
//
// Off, the default (no [tracing] endpoint), Start returns the context it
// was given and a span that records nothing, without allocating; the
// daemon turns tracing on once, at start, with Use.
package tracing

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope is the instrumentation scope of minicri's own spans.
const Scope = "github.com/minicri/minicri"

// The attributes of minicri's spans: IDs and digests minicri made or
// checked, the handler and CNI network of the node's configuration, the
// pod's Kubernetes name and namespace, and exit codes. Never a text a
// client chose beyond those names (a command, an argument, an environment
// value, a mount's path, a label, an annotation, an image reference, auth)
// nor the text of an error (a runtime's or a registry's message quotes
// them): docs/security.md. The Kubernetes and process ones are
// OpenTelemetry's semantic conventions.
const (
	PodID        = attribute.Key("minicri.pod_sandbox.id")
	ContainerID  = attribute.Key("minicri.container.id")
	Handler      = attribute.Key("minicri.runtime.handler")
	ImageID      = attribute.Key("minicri.image.id")
	LayerDigest  = attribute.Key("minicri.image.layer.digest")
	CNINetwork   = attribute.Key("minicri.cni.network")
	PodName      = attribute.Key("k8s.pod.name")
	PodNamespace = attribute.Key("k8s.namespace.name")
	ExitCode     = attribute.Key("process.exit.code")
)

type active struct{ tracer trace.Tracer }

var current atomic.Pointer[active]

var noSpan trace.Span = noop.Span{}

// Use sends the spans started from now on to tp; nil turns tracing off.
// The daemon calls it once, before it serves.
func Use(tp trace.TracerProvider) {
	if tp == nil {
		current.Store(nil)
		return
	}
	current.Store(&active{tracer: tp.Tracer(Scope)})
}

// Start starts the span name as a child of ctx's span. Work that no call
// started (recovery at start, a monitor's exit) has no span in its context
// and makes no trace of its own: its spans would be roots that no one asked
// for. Off, or without a parent, it returns ctx and a span that does
// nothing.
func Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	a := current.Load()
	if a == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, noSpan
	}
	return a.start(ctx, name, attrs)
}

// start copies attrs, so that Start's callers keep theirs on the stack:
// the tracer keeps what it is given.
func (a *active) start(ctx context.Context, name string, attrs []attribute.KeyValue) (context.Context, trace.Span) {
	return a.tracer.Start(ctx, name, trace.WithAttributes(slices.Clone(attrs)...))
}

// MaxValueLen bounds an attribute's value: what a span holds while it
// waits in the export queue does not grow with what a request named.
const MaxValueLen = 1024

// End ends span, marked failed when err is not nil, with a fixed word
// (Failure's) for its status, never err's message: that quotes what the
// call was given (runc's "exec: /path: no such file" names argv[0], a
// mount's error its host path, a registry's answer the reference), which
// the caller gets in its answer anyway and a trace collector must not. No
// stack, no event.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, Failure(err))
	}
	span.End()
}

// Failure is the fixed word a span's status says of err: the end of the
// call's time or its cancelation, or that it failed.
func Failure(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline exceeded"
	case errors.Is(err, context.Canceled):
		return "canceled"
	default:
		return "failed"
	}
}
