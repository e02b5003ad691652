//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// freeLoopbackAddr is a 127.0.0.1 address with a port free a moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, body)
	}
	return string(body)
}

// metricValue is the value of one series in a scrape, 0 when it is absent
// (a counter not yet incremented has no series).
func metricValue(t *testing.T, scrape, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(scrape)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("series %s: value %q: %v", series, m[1], err)
	}
	return v
}

func TestMetricsEndpointCountsExecSync(t *testing.T) {
	addr := freeLoopbackAddr(t)
	e := newExecEnv(t, WithArgs("--metrics-address", addr))
	id := e.sleeper(t, "probe")
	url := "http://" + addr + "/metrics"

	before := httpGet(t, url)
	for _, want := range []string{"go_goroutines ", "process_resident_memory_bytes ", `minicri_containers{state="running"} 1`} {
		if !strings.Contains(before, want) {
			t.Errorf("first scrape lacks %q", want)
		}
	}
	const (
		execOK   = `minicri_exec_sync_duration_seconds_count{result="exit_zero"}`
		execFail = `minicri_exec_sync_duration_seconds_count{result="exit_nonzero"}`
		rpc      = `minicri_cri_request_duration_seconds_count{code="OK",method="ExecSync"}`
	)
	if _, _, err := e.d.Runtime.ExecSync(context.Background(), id, []string{"true"}, 10*time.Second); err != nil {
		t.Fatalf("ExecSync true: %v", err)
	}
	if _, _, err := e.d.Runtime.ExecSync(context.Background(), id, []string{"false"}, 10*time.Second); err == nil {
		t.Fatal("ExecSync false: no error, want its exit code 1")
	}
	after := httpGet(t, url)
	for _, c := range []struct {
		series string
		delta  float64
	}{{execOK, 1}, {execFail, 1}, {rpc, 2}} {
		if got := metricValue(t, after, c.series) - metricValue(t, before, c.series); got != c.delta {
			t.Errorf("%s moved by %v, want %v", c.series, got, c.delta)
		}
	}
	if metricValue(t, after, `minicri_image_pull_duration_seconds_count{result="success"}`) < 1 {
		t.Error("the pull of the test's image is not counted")
	}
}

func TestProfileEndpointAnswers(t *testing.T) {
	addr := freeLoopbackAddr(t)
	d := StartDaemon(t, WithArgs("--profile-address", addr))
	body := httpGet(t, fmt.Sprintf("http://%s/debug/pprof/", addr))
	if !strings.Contains(body, "goroutine") || !strings.Contains(body, "heap") {
		t.Fatalf("pprof index lacks the goroutine and heap profiles:\n%s", body)
	}
	if goroutines := httpGet(t, fmt.Sprintf("http://%s/debug/pprof/goroutine?debug=1", addr)); !strings.Contains(goroutines, "goroutine profile:") {
		t.Fatalf("goroutine profile:\n%.500s", goroutines)
	}
	// Metrics stay off unless asked for.
	if strings.Contains(d.Output(), "component=metrics") {
		t.Error("the metrics endpoint started without metrics.address")
	}
}

// A non-loopback address is refused at start, naming the key: the
// endpoints have no authentication.
func TestObservabilityRefusesNonLoopbackAddress(t *testing.T) {
	d := NewDaemon(t)
	code, out := runMinicri(t, append(d.args, "--metrics-address", "0.0.0.0:9388")...)
	if code == 0 || !strings.Contains(out, "metrics.address") {
		t.Fatalf("minicri with a non-loopback metrics address: exit %d, want an error naming metrics.address:\n%s", code, out)
	}
}
