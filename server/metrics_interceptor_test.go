package server

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/metrics"
)

func scrapeMetrics(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	return string(body)
}

func TestMetricsInterceptorCountsCallsByMethodAndCode(t *testing.T) {
	m := metrics.New()
	// Chained as the daemon chains them: the panic's Internal is counted.
	chain := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return MetricsUnaryInterceptor(m)(ctx, req, info, func(ctx context.Context, req any) (any, error) {
			return UnaryInterceptor(quietLog())(ctx, req, info, h)
		})
	}
	ok := func(context.Context, any) (any, error) { return &runtime.VersionResponse{}, nil }
	notFound := func(context.Context, any) (any, error) { return nil, status.Error(codes.NotFound, "no such container") }
	panicking := func(context.Context, any) (any, error) { panic("boom") }
	call := func(method string, h grpc.UnaryHandler) {
		_, _ = chain(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/" + method}, h)
	}
	call("Version", ok)
	call("Version", ok)
	call("ContainerStatus", notFound)
	call("StopContainer", panicking)

	body := scrapeMetrics(t, m)
	for _, want := range []string{
		`minicri_cri_request_duration_seconds_count{code="OK",method="Version"} 2`,
		`minicri_cri_request_errors_total{code="NotFound",method="ContainerStatus"} 1`,
		`minicri_cri_request_errors_total{code="Internal",method="StopContainer"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if strings.Contains(body, `minicri_cri_request_errors_total{code="OK"`) {
		t.Error("a successful call counted as an error")
	}
}

func TestMetricsInterceptorWithoutMetrics(t *testing.T) {
	_, err := MetricsUnaryInterceptor(nil)(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/x/Y"},
		func(context.Context, any) (any, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
}

func TestContainerStatesReadAtScrape(t *testing.T) {
	s := newRecordsServer(t)
	s.metrics = metrics.New()
	s.countObjects()
	eventPod(t, s) // a ready sandbox, a running container
	body := scrapeMetrics(t, s.metrics)
	for _, want := range []string{
		`minicri_containers{state="running"} 1`,
		`minicri_containers{state="exited"} 0`,
		`minicri_pod_sandboxes{state="ready"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}
