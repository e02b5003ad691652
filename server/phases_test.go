package server

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/minicri/minicri/metrics"
)

// The phases of one call add up per name, in the metric that make bench
// reads; a server without metrics times nothing and does not fail.
func TestPhasesAddUpPerName(t *testing.T) {
	s := &Server{metrics: metrics.New()}
	ctx, p := s.withPhases(context.Background(), "RunPodSandbox")
	phaseDone(ctx, "record")
	phaseDone(ctx, "cni")
	phaseDone(ctx, "record")
	p.observe()

	rec := httptest.NewRecorder()
	s.metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, phase := range []string{"record", "cni", "other"} {
		want := `minicri_operation_phase_duration_seconds_count{operation="RunPodSandbox",phase="` + phase + `"} 1`
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %s (a phase named twice is one observation)", want)
		}
	}

	off := &Server{}
	ctx, p = off.withPhases(context.Background(), "StopPodSandbox")
	phaseDone(ctx, "cni")
	p.observe()
	phaseDone(context.Background(), "cni") // no timer in the context
}
