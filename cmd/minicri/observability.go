package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/internal/connlimit"
	"github.com/minicri/minicri/metrics"
)

// The metrics and profile endpoints answer whoever reaches their address,
// before anything else: their connections are bounded as the streaming
// server's are (internal/connlimit), so that a flood of them costs the
// daemon at most endpointMaxConns descriptors and goroutines each.
const (
	// A Prometheus scrapes with one connection; an operator profiles with
	// one or two.
	endpointMaxConns   = 64
	endpointMaxWaiting = 16
	// endpointHeaderTimeout bounds the wait for a request's headers;
	// endpointIdleTimeout the wait for the next request on a kept-alive
	// connection.
	endpointHeaderTimeout = 5 * time.Second
	endpointIdleTimeout   = 30 * time.Second
	// endpointWriteTimeout is what a client has to take its answer, after
	// any wait it asked for (a profile's ?seconds=N, 30 s when unsaid).
	endpointWriteTimeout = 30 * time.Second
	defaultProfileWait   = 30 * time.Second
)

// defaultMemProfileRate is Go's own sampling of the heap profile: one
// sample per 512 KiB allocated on average.
const defaultMemProfileRate = 512 * 1024

// startObservability starts the endpoints the configuration asks for: the
// Prometheus metrics (metrics.address) and Go's profiles (profile_address).
// Both are off by default; the metrics are nil, and nothing counted, while
// their endpoint is off. The returned stop closes whatever was started.
func startObservability(cfg config.Config, log *logrus.Entry) (*metrics.Metrics, func(), error) {
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	var m *metrics.Metrics
	if cfg.Metrics.Address != "" {
		m = metrics.New()
		mux := http.NewServeMux()
		mux.Handle("/metrics", m.Handler())
		closeFn, err := serveHTTP(cfg.Metrics.Address, mux, log.WithField("component", "metrics"))
		if err != nil {
			return nil, nil, fmt.Errorf("metrics.address: %w", err)
		}
		stops = append(stops, closeFn)
	}
	if cfg.ProfileAddress != "" {
		runtime.MemProfileRate = defaultMemProfileRate // off until now (main)
		// Its own mux, not http.DefaultServeMux: nothing else is served there.
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		closeFn, err := serveHTTP(cfg.ProfileAddress, mux, log.WithField("component", "pprof"))
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("profile_address: %w", err)
		}
		stops = append(stops, closeFn)
	}
	return m, stop, nil
}

// serveHTTP listens at once, so that an address in use fails the start,
// and serves in the background until the returned function is called. An
// absolute path is a unix socket only root can use (0600); anything else a
// host:port, which config validation keeps on loopback unless told.
func serveHTTP(addr string, h http.Handler, log *logrus.Entry) (func(), error) {
	var l net.Listener
	var err error
	if filepath.IsAbs(addr) {
		if err := os.MkdirAll(filepath.Dir(addr), 0o700); err != nil {
			return nil, err
		}
		l, err = listenSocket(addr, 0o600)
	} else {
		l, err = net.Listen("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	limited := connlimit.New(l, connlimit.Limits{Max: endpointMaxConns, MaxWaiting: endpointMaxWaiting}, log)
	// No server-wide write or read timeout: a CPU profile or a trace runs
	// for as long as asked (?seconds=N), and a read timeout would cancel it
	// (net/http ends the request's context when its background read fails).
	srv := &http.Server{
		Handler:           connlimit.Bodiless(writeDeadline(h), http.MethodGet, http.MethodHead),
		ReadHeaderTimeout: endpointHeaderTimeout,
		IdleTimeout:       endpointIdleTimeout,
		ConnState:         limited.ConnState,
	}
	go func() {
		if err := srv.Serve(limited); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).Error("HTTP endpoint stopped")
		}
	}()
	log.WithField("address", l.Addr().String()).Info("HTTP endpoint listening")
	return func() { _ = srv.Close() }, nil
}

// writeDeadline gives each request the wait it asked for (?seconds=N) and
// endpointWriteTimeout more to take its answer: a client that stops reading
// does not hold its connection and goroutine for ever.
func writeDeadline(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wait := defaultProfileWait
		if s, err := strconv.ParseFloat(r.URL.Query().Get("seconds"), 64); err == nil && s > 0 && s < 1e6 {
			wait = time.Duration(s * float64(time.Second))
		}
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + endpointWriteTimeout))
		h.ServeHTTP(w, r)
	})
}
