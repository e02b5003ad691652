package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/internal/tracing"
	"github.com/minicri/minicri/server"
)

// A collector that is down, slow or never answers must never slow or fail a
// CRI call: spans go to a bounded queue (a full one drops them) that a
// goroutine of the batch processor empties, and each export gives up after
// tracingExportTimeout, retries included. At SIGTERM what is queued gets
// tracingShutdownTimeout to go out, no more.
const (
	tracingQueueSize       = 2048 // the SDK's default: some 2 MiB of spans at most
	tracingBatchTimeout    = 2 * time.Second
	tracingExportTimeout   = 10 * time.Second
	tracingShutdownTimeout = 2 * time.Second
	// tracingErrorEvery spaces the log lines of failed exports: a collector
	// that stays down would fill the log with one a batch.
	tracingErrorEvery = time.Minute
)

// startTracing sets up OpenTelemetry when [tracing] names an endpoint: an
// OTLP/gRPC exporter behind a batch processor, a parent-based sampler (a
// call that brings the kubelet's trace context follows the kubelet's
// decision; one without is sampled at sampling_ratio), W3C trace context
// taken from the calls' gRPC metadata, and the gRPC instrumentation's stats
// handler, which starts each CRI call's span. Off, it installs nothing:
// no option, no exporter, no goroutine; the packages' spans are no-ops.
// The returned stop flushes what is queued, bounded in time.
func startTracing(cfg config.TracingConfig, log *logrus.Entry) ([]grpc.ServerOption, func(), error) {
	if cfg.Endpoint == "" {
		return nil, func() {}, nil
	}
	exporter, err := otlptracegrpc.New(context.Background(),
		otlptracegrpc.WithEndpoint(cfg.Endpoint),
		otlptracegrpc.WithInsecure(),
		otlptracegrpc.WithTimeout(tracingExportTimeout),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing.endpoint: %w", err)
	}
	otel.SetErrorHandler(spacedErrors(log.WithField("component", "tracing"), tracingErrorEvery))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter,
			sdktrace.WithMaxQueueSize(tracingQueueSize),
			sdktrace.WithBatchTimeout(tracingBatchTimeout),
			sdktrace.WithExportTimeout(tracingExportTimeout),
		),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SamplingRatio))),
		sdktrace.WithSpanLimits(spanLimits()),
		sdktrace.WithResource(resource.NewSchemaless(
			attribute.String("service.name", "minicri"),
			attribute.String("service.version", version),
		)),
	)
	tracing.Use(tp)
	stats := otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(propagation.TraceContext{}),
		// Call counts and durations are the Prometheus metrics' job.
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
	)
	log.WithFields(logrus.Fields{"endpoint": cfg.Endpoint, "sampling_ratio": cfg.SamplingRatio}).Info("tracing: exporting spans over OTLP/gRPC")
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		defer cancel()
		tracing.Use(nil)
		if err := tp.Shutdown(ctx); err != nil {
			log.WithError(err).Warn("tracing: spans still queued at shutdown were dropped")
		}
	}
	opts := []grpc.ServerOption{
		grpc.StatsHandler(server.TracingStatsHandler(stats)),
		grpc.ChainUnaryInterceptor(server.TracingUnaryInterceptor()),
	}
	return opts, stop, nil
}

// spanLimits are the SDK's (128 attributes, events and links a span), with
// each attribute's value cut at tracing.MaxValueLen: a queue full of spans
// stays some MiB whatever a request named.
func spanLimits() sdktrace.SpanLimits {
	l := sdktrace.NewSpanLimits()
	l.AttributeValueLengthLimit = tracing.MaxValueLen
	return l
}

// spacedErrors logs the SDK's errors (a failed export, mostly) at most once
// every interval, saying how many were left out.
func spacedErrors(log *logrus.Entry, every time.Duration) otel.ErrorHandler {
	var mu sync.Mutex
	var last time.Time
	skipped := 0
	return otel.ErrorHandlerFunc(func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if !last.IsZero() && time.Since(last) < every {
			skipped++
			return
		}
		log.WithError(err).WithField("errors_not_logged", skipped).Warn("tracing: spans not exported")
		last, skipped = time.Now(), 0
	})
}
