package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/minicri/minicri/metrics"
)

// The phases of one call add up per name, in the metric that make bench
// reads; a daemon without metrics times nothing and does not fail.
func TestPhasesAddUpPerName(t *testing.T) {
	m := metrics.New()
	ctx, p := WithPhases(context.Background(), m, "RunPodSandbox")
	PhaseDone(ctx, "record")
	PhaseDone(ctx, "cni")
	PhaseDone(ctx, "record")
	p.Observe()

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, phase := range []string{"record", "cni", "other"} {
		want := `minicri_operation_phase_duration_seconds_count{operation="RunPodSandbox",phase="` + phase + `"} 1`
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %s (a phase named twice is one observation)", want)
		}
	}

	ctx, p = WithPhases(context.Background(), nil, "StopPodSandbox")
	PhaseDone(ctx, "cni")
	p.Observe()
	PhaseDone(context.Background(), "cni") // no timer in the context
}

// A pod's containers are removed side by side (eachContainer), each marking
// its phases on the call's one timer: the marks must not race (the daemon
// died of a concurrent map write in RemovePodSandbox of a two-container
// pod), and every phase is still observed once.
func TestPhasesMarkedFromSeveralGoroutines(t *testing.T) {
	m := metrics.New()
	ctx, p := WithPhases(context.Background(), m, "RemovePodSandbox")
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				PhaseDone(ctx, fmt.Sprintf("container_%d", j%5))
			}
		}()
	}
	wg.Wait()
	p.Observe()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for j := 0; j < 5; j++ {
		want := fmt.Sprintf(`minicri_operation_phase_duration_seconds_count{operation="RemovePodSandbox",phase="container_%d"} 1`, j)
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
}

// A step's time counts to its phase whether it failed or not, its error is
// the caller's, and without a span it runs in the call's own context.
func TestStepCountsToItsPhase(t *testing.T) {
	m := metrics.New()
	ctx, p := WithPhases(context.Background(), m, "CreateContainer")
	boom := errors.New("boom")
	var sawCtx context.Context
	if err := Step(ctx, StepOf{Phase: "bundle"}, func(ctx context.Context) error { sawCtx = ctx; return nil }); err != nil {
		t.Fatal(err)
	}
	if sawCtx != ctx {
		t.Error("a step without a span ran in another context than the call's")
	}
	if err := Step(ctx, StepOf{Phase: "record", Crash: "never-named"}, func(context.Context) error { return boom }); err != boom {
		t.Fatalf("step = %v, want fn's error as is", err)
	}
	p.Observe()

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, phase := range []string{"bundle", "record"} {
		want := `minicri_operation_phase_duration_seconds_count{operation="CreateContainer",phase="` + phase + `"} 1`
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
}
