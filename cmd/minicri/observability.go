package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/metrics"
)

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
// and serves in the background until the returned function is called.
func serveHTTP(addr string, h http.Handler, log *logrus.Entry) (func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	// A CPU profile or a trace runs for as long as asked (?seconds=N):
	// no write timeout; slow headers are cut.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).Error("HTTP endpoint stopped")
		}
	}()
	log.WithField("address", l.Addr().String()).Info("HTTP endpoint listening")
	return func() { _ = srv.Close() }, nil
}
