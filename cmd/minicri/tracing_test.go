package main

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
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
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	runtime.RegisterRuntimeServiceServer(g, versionServer{})
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := runtime.NewRuntimeServiceClient(conn)

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
