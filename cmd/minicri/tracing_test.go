package main

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/internal/tracing"
	"github.com/minicri/minicri/test/otlp"
)

func quietLog() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return logrus.NewEntry(l)
}

// Off, nothing is installed: no stats handler, no interceptor, and the
// packages' spans stay no-ops.
func TestTracingOffInstallsNothing(t *testing.T) {
	opts, stop, err := startTracing(config.Default().Tracing, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if len(opts) != 0 {
		t.Fatalf("tracing off gave the gRPC server %d options, want none", len(opts))
	}
	ctx, span := tracing.Start(context.Background(), "runtime.start")
	if span.IsRecording() || ctx != context.Background() {
		t.Fatal("tracing off: a span records")
	}
}

// [tracing] is set up once, at start: a SIGHUP that changes it says it
// needs a restart.
func TestTracingIsRestartOnly(t *testing.T) {
	a, b := config.Default(), config.Default()
	b.Tracing = config.TracingConfig{Endpoint: "127.0.0.1:4317", SamplingRatio: 0.5}
	got := restartOnly(a, b)
	if want := []string{"tracing.endpoint", "tracing.sampling_ratio"}; !slices.Equal(got, want) {
		t.Fatalf("restart-only keys %v, want %v", got, want)
	}
}

// versionServer answers Version, the smallest CRI call.
type versionServer struct {
	runtime.UnimplementedRuntimeServiceServer
}

func (versionServer) Version(context.Context, *runtime.VersionRequest) (*runtime.VersionResponse, error) {
	return &runtime.VersionResponse{RuntimeName: "minicri"}, nil
}

// A collector that takes the connection and never answers holds no CRI
// call, even once the span queue is full, and the shutdown that flushes
// the queue at SIGTERM still ends.
func TestSilentCollectorHoldsNoCall(t *testing.T) {
	cfg := config.TracingConfig{Endpoint: otlp.Silent(t), SamplingRatio: 1}
	opts, stop, err := startTracing(cfg, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	if len(opts) == 0 {
		t.Fatal("tracing on gave the gRPC server no options")
	}
	client := serveVersion(t, opts)

	// More sampled calls than the queue holds: the extra spans are dropped,
	// never waited for.
	for i := range tracingQueueSize + 500 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		_, err := client.Version(ctx, &runtime.VersionRequest{})
		cancel()
		if err != nil {
			t.Fatalf("call %d with the collector silent: %v", i, err)
		}
	}

	done := make(chan struct{})
	go func() {
		stop()
		close(done)
	}()
	stopped = true
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the tracing shutdown did not end within 30 s with the collector silent")
	}
}

// discardCollector is an OTLP/gRPC receiver that takes spans and drops them.
type discardCollector struct {
	collectortrace.UnimplementedTraceServiceServer
	spans atomic.Int64
}

func (c *discardCollector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			c.spans.Add(int64(len(ss.GetSpans())))
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// BenchmarkCRICall times one sampled CRI call (Version, which does no work
// of its own) through the daemon's gRPC server set-up, tracing off and on
// (exporting to a receiver that drops the spans): what tracing adds to
// every call, apart from the spans below it.
//
//	go test -run '^$' -bench CRICall -benchmem ./cmd/minicri/
func BenchmarkCRICall(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "tracing off"
		if on {
			name = "tracing on"
		}
		b.Run(name, func(b *testing.B) {
			var cfg config.TracingConfig
			collector := &discardCollector{}
			if on {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				g := grpc.NewServer()
				collectortrace.RegisterTraceServiceServer(g, collector)
				go func() { _ = g.Serve(l) }()
				b.Cleanup(g.Stop)
				cfg = config.TracingConfig{Endpoint: l.Addr().String(), SamplingRatio: 1}
			}
			opts, stop, err := startTracing(cfg, quietLog())
			if err != nil {
				b.Fatal(err)
			}
			client := serveVersion(b, opts)
			ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
			b.ResetTimer()
			for range b.N {
				if _, err := client.Version(ctx, &runtime.VersionRequest{}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			stop()
			if on && collector.spans.Load() == 0 {
				b.Fatal("no span reached the collector")
			}
		})
	}
}

// serveVersion serves versionServer with opts on a unix socket and returns
// a client of it.
func serveVersion(tb testing.TB, opts []grpc.ServerOption) runtime.RuntimeServiceClient {
	tb.Helper()
	sock := filepath.Join(tb.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	runtime.RegisterRuntimeServiceServer(g, versionServer{})
	go func() { _ = g.Serve(l) }()
	tb.Cleanup(g.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return runtime.NewRuntimeServiceClient(conn)
}

// An attribute's value is cut at tracing.MaxValueLen: a long image
// reference or path does not sit whole in every queued span.
func TestSpanLimitsCutLongValues(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSpanLimits(spanLimits()))
	_, span := tp.Tracer("test").Start(context.Background(), "image.pull", trace.WithAttributes(tracing.PodName.String(strings.Repeat("a", 1<<20))))
	span.End()
	if got := len(rec.Ended()[0].Attributes()[0].Value.AsString()); got != tracing.MaxValueLen {
		t.Fatalf("attribute value of %d bytes kept, want %d", got, tracing.MaxValueLen)
	}
}
