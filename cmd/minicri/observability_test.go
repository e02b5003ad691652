package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/minicri/minicri/config"
)

// TestServeHTTPOnUnixSocket: an absolute path is served on a unix socket of
// mode 0600 (its directory made if missing), a request with a body is
// refused at once, and the socket goes when the endpoint stops.
func TestServeHTTPOnUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "run", "debug.sock")
	stop, err := serveHTTP(sock, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }),
		logrus.NewEntry(logrus.New()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: mode %v, want a socket of mode 0600", sock, st.Mode())
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	resp, err := client.Get("http://pprof/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Fatalf("GET over the socket: %d %q", resp.StatusCode, body)
	}

	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a request announcing a body it never sends: %v, want an answer 400 at once", err)
	}

	stop()
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("the socket outlived its endpoint: %v", err)
	}
}

// The heap profile is sampled only while the profile endpoint can serve it.
func TestHeapSamplingOnlyWithTheProfileEndpoint(t *testing.T) {
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = 0 // as main leaves it
	log := logrus.NewEntry(logrus.New())
	var cfg config.Config
	_, stop, err := startObservability(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if runtime.MemProfileRate != 0 {
		t.Fatalf("heap sampling on (rate %d) with no profile endpoint", runtime.MemProfileRate)
	}
	cfg.ProfileAddress = filepath.Join(t.TempDir(), "debug.sock")
	_, stop, err = startObservability(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if runtime.MemProfileRate != defaultMemProfileRate {
		t.Fatalf("heap sampling rate %d with the profile endpoint on, want %d", runtime.MemProfileRate, defaultMemProfileRate)
	}
}
