// Package metrics holds minicri's Prometheus metrics: what the daemon counts
// and times, and the HTTP handler that serves them. It knows no gRPC and no
// CRI types: callers pass plain names, codes and durations. Every method
// accepts a nil *Metrics and then does nothing, so that a daemon without a
// metrics address pays nothing for them.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "minicri"

// Buckets, in seconds. CRI calls and exec probes take milliseconds, a
// create or a stop up to seconds; a pull seconds to minutes.
var (
	callBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	execBuckets = []float64{.005, .01, .02, .03, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	pullBuckets = []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
)

// Metrics is the daemon's set of metrics and the registry that serves them.
type Metrics struct {
	reg *prometheus.Registry

	rpcDuration   *prometheus.HistogramVec
	rpcErrors     *prometheus.CounterVec
	execSync      *prometheus.HistogramVec
	execStream    *prometheus.HistogramVec
	pullBytes     prometheus.Counter
	pullDuration  *prometheus.HistogramVec
	monitorDeaths prometheus.Counter
	repairs       *prometheus.CounterVec
	phases        *prometheus.HistogramVec
}

// New makes the metrics with the Go runtime's and the process's own.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		rpcDuration: newHistogram("cri_request_duration_seconds",
			"Duration of CRI calls by method and gRPC code; a streaming call (GetContainerEvents) lasts as long as its stream.",
			callBuckets, "method", "code"),
		rpcErrors: newCounterVec("cri_request_errors_total",
			"CRI calls that failed, by method and gRPC code.",
			"method", "code"),
		execSync: newHistogram("exec_sync_duration_seconds",
			"Duration of ExecSync commands (exec probes) by result: exit_zero, exit_nonzero, timeout or error.",
			execBuckets, "result"),
		execStream: newHistogram("exec_stream_duration_seconds",
			"Duration of streamed execs (kubectl exec) from connect to end, by result: exit_zero, exit_nonzero or error.",
			execBuckets, "result"),
		pullBytes: newCounter("image_pull_bytes_total",
			"Size of the images pulled successfully (compressed layers and config, as crictl shows it), layers already present included."),
		pullDuration: newHistogram("image_pull_duration_seconds",
			"Duration of image pulls by result: success or error.",
			pullBuckets, "result"),
		monitorDeaths: newCounter("monitor_deaths_total",
			"Containers whose minicri-conmon monitor ended without writing their exit (killed, crashed); each such container is killed."),
		repairs: newCounterVec("startup_repairs_total",
			"Repairs made by the start-up recovery, by kind.",
			"kind"),
		phases: newHistogram("operation_phase_duration_seconds",
			"Duration of the steps of the costly CRI calls (RunPodSandbox, CreateContainer, StopPodSandbox, RemovePodSandbox) and of the daemon's start (Start: records, containers, sweep ...) by operation and phase (cni, runtime, monitor, record ...), to see where a call's time goes.",
			callBuckets, "operation", "phase"),
	}
	m.reg.MustRegister(m.rpcDuration, m.rpcErrors, m.execSync, m.execStream, m.pullBytes, m.pullDuration,
		m.monitorDeaths, m.repairs, m.phases,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// newHistogram, newCounterVec and newCounter make the daemon's metrics, all
// under the minicri namespace.
func newHistogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets}, labels)
}

func newCounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
}

func newCounter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help})
}

// Handler serves the metrics in the Prometheus text (or OpenMetrics) format,
// never compressed. A scrape that asks for gzip (Prometheus and Go's HTTP
// client always do) would otherwise take a gzip writer at the default level
// from promhttp's pool, compressor state many times the size of the text it
// shrinks, which stays on the daemon's heap until two collections pass, for
// a node-local connection that gains nothing from compression.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, DisableCompression: true})
}

// Registry is where further collectors are registered.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObserveCall records one CRI call: its method (as "RunPodSandbox"), its
// gRPC code (as "OK", "NotFound") and how long it took.
func (m *Metrics) ObserveCall(method, code string, took time.Duration) {
	if m == nil {
		return
	}
	m.rpcDuration.WithLabelValues(method, code).Observe(took.Seconds())
	if code != "OK" {
		m.rpcErrors.WithLabelValues(method, code).Inc()
	}
}

// ExecResult is how an exec ended, for the exec metrics' result label.
type ExecResult string

const (
	ExecExitZero    ExecResult = "exit_zero"
	ExecExitNonzero ExecResult = "exit_nonzero"
	ExecTimeout     ExecResult = "timeout"
	ExecError       ExecResult = "error"
)

// ExitResult is the result of an exec that ran to an exit code.
func ExitResult(code int) ExecResult {
	if code == 0 {
		return ExecExitZero
	}
	return ExecExitNonzero
}

// ObserveExecSync records one ExecSync command.
func (m *Metrics) ObserveExecSync(result ExecResult, took time.Duration) {
	if m == nil {
		return
	}
	m.execSync.WithLabelValues(string(result)).Observe(took.Seconds())
}

// ObserveExecStream records one streamed exec.
func (m *Metrics) ObserveExecStream(result ExecResult, took time.Duration) {
	if m == nil {
		return
	}
	m.execStream.WithLabelValues(string(result)).Observe(took.Seconds())
}

// ObservePull records one image pull; bytes counts only when it succeeded.
func (m *Metrics) ObservePull(bytes uint64, err error, took time.Duration) {
	if m == nil {
		return
	}
	result := "success"
	if err != nil {
		result = "error"
	} else {
		m.pullBytes.Add(float64(bytes))
	}
	m.pullDuration.WithLabelValues(result).Observe(took.Seconds())
}

// ObservePhase records how long one phase of an operation took (operation
// "StopPodSandbox", phase "cni").
func (m *Metrics) ObservePhase(operation, phase string, took time.Duration) {
	if m == nil {
		return
	}
	m.phases.WithLabelValues(operation, phase).Observe(took.Seconds())
}

// MonitorDied counts a container whose monitor ended without its exit.
func (m *Metrics) MonitorDied() {
	if m == nil {
		return
	}
	m.monitorDeaths.Inc()
}

// Repaired counts one start-up repair of a kind (say "container_rolled_back").
func (m *Metrics) Repaired(kind string) {
	if m == nil {
		return
	}
	m.repairs.WithLabelValues(kind).Inc()
}

// CountObjects registers a collector that reports, at each scrape, how many
// objects of a kind ("containers", "pod_sandboxes") are in each state, as
// count() gives them: the store is read when asked, not kept in step by
// every call that changes a state. States that count() always lists (even
// at 0) keep their series.
func (m *Metrics) CountObjects(kind, help string, count func() map[string]int) {
	if m == nil {
		return
	}
	m.reg.MustRegister(&stateCollector{
		desc:  prometheus.NewDesc(prometheus.BuildFQName(namespace, "", kind), help, []string{"state"}, nil),
		count: count,
	})
}

type stateCollector struct {
	desc  *prometheus.Desc
	count func() map[string]int
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	for state, n := range c.count() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), state)
	}
}
