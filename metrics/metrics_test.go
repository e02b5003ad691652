package metrics

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, body)
	}
	return string(body)
}

func TestNilMetricsDoNothing(t *testing.T) {
	var m *Metrics
	m.ObserveCall("Version", "OK", time.Millisecond)
	m.ObserveExecSync(ExecExitZero, time.Millisecond)
	m.ObserveExecStream(ExecError, time.Millisecond)
	m.ObservePull(10, nil, time.Second)
	m.MonitorDied()
	m.Repaired("x")
	m.ObservePhase("StopPodSandbox", "cni", time.Millisecond)
	m.CountObjects("containers", "h", func() map[string]int { return nil })
}

func TestCallsCountedByMethodAndCode(t *testing.T) {
	m := New()
	m.ObserveCall("ExecSync", "OK", 20*time.Millisecond)
	m.ObserveCall("ExecSync", "OK", 30*time.Millisecond)
	m.ObserveCall("ContainerStatus", "NotFound", time.Millisecond)
	body := scrape(t, m)
	if got := strings.Count(body, "minicri_cri_request_duration_seconds_count{"); got != 2 {
		t.Errorf("%d duration series, want 2 (ExecSync OK, ContainerStatus NotFound)", got)
	}
	if got := strings.Count(body, "minicri_cri_request_errors_total{"); got != 1 {
		t.Errorf("%d error series, want 1: an OK call is no error", got)
	}
	for _, want := range []string{
		`minicri_cri_request_duration_seconds_count{code="OK",method="ExecSync"} 2`,
		`minicri_cri_request_errors_total{code="NotFound",method="ContainerStatus"} 1`,
		"go_goroutines ", "process_resident_memory_bytes ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}

func TestExecAndPullMetrics(t *testing.T) {
	m := New()
	m.ObserveExecSync(ExitResult(0), 10*time.Millisecond)
	m.ObserveExecSync(ExitResult(1), 10*time.Millisecond)
	m.ObserveExecSync(ExecTimeout, time.Second)
	m.ObserveExecStream(ExitResult(0), time.Second)
	m.ObservePull(1000, nil, time.Second)
	m.ObservePull(500, errors.New("refused"), time.Second)
	body := scrape(t, m)
	for _, want := range []string{
		"minicri_image_pull_bytes_total 1000\n", // a failed pull adds none
		`minicri_exec_sync_duration_seconds_count{result="exit_zero"} 1`,
		`minicri_exec_sync_duration_seconds_count{result="exit_nonzero"} 1`,
		`minicri_exec_sync_duration_seconds_count{result="timeout"} 1`,
		`minicri_exec_stream_duration_seconds_count{result="exit_zero"} 1`,
		`minicri_image_pull_duration_seconds_count{result="success"} 1`,
		`minicri_image_pull_duration_seconds_count{result="error"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}

func TestObjectStatesReadAtScrape(t *testing.T) {
	m := New()
	var mu sync.Mutex
	states := map[string]int{"running": 2, "exited": 1}
	calls := 0
	m.CountObjects("containers", "Containers by state.", func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		calls++
		out := map[string]int{}
		for k, v := range states {
			out[k] = v
		}
		return out
	})
	body := scrape(t, m)
	if !strings.Contains(body, `minicri_containers{state="running"} 2`) || !strings.Contains(body, `minicri_containers{state="exited"} 1`) {
		t.Fatalf("scrape lacks the container states:\n%s", body)
	}
	mu.Lock()
	states["running"] = 0
	states["exited"] = 3
	mu.Unlock()
	body = scrape(t, m)
	if !strings.Contains(body, `minicri_containers{state="running"} 0`) || !strings.Contains(body, `minicri_containers{state="exited"} 3`) {
		t.Fatalf("second scrape does not show the new states:\n%s", body)
	}
	if calls != 2 {
		t.Errorf("count called %d times for 2 scrapes", calls)
	}
}

func TestRepairsAndMonitorDeaths(t *testing.T) {
	m := New()
	m.MonitorDied()
	m.Repaired("container_rolled_back")
	m.Repaired("container_rolled_back")
	body := scrape(t, m)
	for _, want := range []string{
		"minicri_monitor_deaths_total 1\n",
		`minicri_startup_repairs_total{kind="container_rolled_back"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}

// TestScrapeIsNeverCompressed: a scrape that offers gzip, as Prometheus and
// Go's HTTP client do, gets plain text, and the daemon keeps no gzip
// writer (~0.8 MB of compressor state) on its heap for it.
func TestScrapeIsNeverCompressed(t *testing.T) {
	m := New()
	m.ObserveCall("ExecSync", "OK", time.Millisecond)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip, zstd")
	m.Handler().ServeHTTP(rec, req)
	if enc := rec.Header().Get("Content-Encoding"); enc != "" && enc != "identity" {
		t.Fatalf("Content-Encoding %q, want none", enc)
	}
	if !strings.Contains(rec.Body.String(), `minicri_cri_request_duration_seconds_count{code="OK",method="ExecSync"} 1`) {
		t.Fatalf("the scrape is not the plain text format:\n%.200q", rec.Body.String())
	}
}
