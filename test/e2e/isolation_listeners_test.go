//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/remotecommand"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A request that announces a body it never sends, to the streaming server
// or the metrics.
func slowBodyRequest(path, host string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 10\r\n\r\n"
}

// flood holds n connections to addr for as long as its context lasts: each
// says what say says, and when the server closes it another is opened in
// its place, as an attacker would.
type flood struct {
	opened atomic.Int64 // connections made
	wg     sync.WaitGroup
}

func startFlood(t *testing.T, ctx context.Context, addr string, n int, say func(net.Conn) error) *flood {
	t.Helper()
	f := &flood{}
	for range n {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for ctx.Err() == nil {
				c, err := net.DialTimeout("tcp", addr, 2*time.Second)
				if err != nil {
					time.Sleep(10 * time.Millisecond) // the backlog is full; try again
					continue
				}
				f.opened.Add(1)
				stop := context.AfterFunc(ctx, func() { c.Close() })
				if say(c) == nil {
					_, _ = io.Copy(io.Discard, c) // until the server closes it
				}
				stop()
				c.Close()
			}
		}()
	}
	return f
}

// wait waits for the flood's goroutines, whose context has ended.
func (f *flood) wait(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		f.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the flood's connections did not end within 30s of its end")
	}
}

// TestStreamingExecThroughSlowBodyFlood: 2,000 connections to the
// streaming server announce a body they never send (GET /exec/x with
// Content-Length: 10), each reopened when the server closes it. With the
// default settings, SPDY and WebSocket execs succeed every second for 12 s
// meanwhile, and the daemon's descriptors and goroutines stay far below the
// flood's: within streaming.max_waiting_connections of their count before.
func TestStreamingExecThroughSlowBodyFlood(t *testing.T) {
	testExecThroughFlood(t, func(c net.Conn, addr string) error {
		_, err := io.WriteString(c, slowBodyRequest("/exec/x", addr))
		return err
	})
}

// TestStreamingExecThroughSilentFlood: the same with 2,000 connections
// that say nothing, which the server must push out to make room (after
// they waited 100 ms) or close after streaming.request_timeout.
func TestStreamingExecThroughSilentFlood(t *testing.T) {
	testExecThroughFlood(t, func(net.Conn, string) error { return nil })
}

// testExecThroughFlood floods the streaming server with connections that
// say what say says, and runs execs over both protocols every second.
func testExecThroughFlood(t *testing.T, say func(c net.Conn, addr string) error) {
	const (
		conns   = 2000
		seconds = 12
		// streaming.max_waiting_connections and a margin for the pod,
		// the execs, the scrapes, and descriptors closed but not yet
		// released (the Go runtime frees one when its blocked reader
		// returns, which on a loaded node takes a while). On main the
		// flood held 1,044.
		fdBound        = 128 + 192
		goroutineBound = 128 + 200
	)
	raiseFDLimit(t, conns+256)
	metricsAddr := freeLoopbackAddr(t)
	e := newExecEnv(t, WithArgs("--metrics-address", metricsAddr))
	goroutines := func() int {
		return int(metricValue(t, httpGet(t, "http://"+metricsAddr+"/metrics"), "go_goroutines"))
	}
	id := e.sleeper(t, "flood")
	echo := &runtime.ExecRequest{ContainerId: id, Cmd: []string{"echo", "through the flood"}, Stdout: true}
	u, err := url.Parse(e.d.execURL(t, echo))
	if err != nil {
		t.Fatal(err)
	}
	addr := u.Host
	before, goroutinesBefore, rssBefore := e.d.daemonFDs(t), goroutines(), e.d.rss(t)

	ctx, cancel := context.WithTimeout(context.Background(), (seconds+30)*time.Second)
	defer cancel()
	f := startFlood(t, ctx, addr, conns, func(c net.Conn) error { return say(c, addr) })
	defer f.wait(t)
	defer cancel()
	waitFor(t, "the flood's connections", 30*time.Second, func() bool { return f.opened.Load() >= conns })

	most, mostGoroutines, mostRSS, slowest := 0, 0, 0, time.Duration(0)
	var failures []string
	for i := range seconds {
		next := time.Now().Add(time.Second)
		for _, proto := range protocols {
			start := time.Now()
			var out lockedBuffer
			err := streamWithin(t, e.d, proto, echo, 10*time.Second, &out)
			slowest = max(slowest, time.Since(start))
			if err != nil || out.String() != "through the flood\n" {
				failures = append(failures, fmt.Sprintf("second %d, %s: err %v, output %q", i, proto, err, out.String()))
			}
		}
		most = max(most, e.d.daemonFDs(t))
		mostGoroutines = max(mostGoroutines, goroutines())
		mostRSS = max(mostRSS, e.d.rss(t))
		time.Sleep(time.Until(next))
	}
	t.Logf("flood: %d connections made; daemon descriptors %d before, at most %d during; goroutines %d, at most %d; RSS %d KiB, at most %d KiB; slowest exec %v",
		f.opened.Load(), before, most, goroutinesBefore, mostGoroutines, rssBefore, mostRSS, slowest)
	if len(failures) > 0 {
		t.Fatalf("%d of %d execs failed during the flood:\n%s", len(failures), 2*seconds, strings.Join(failures, "\n"))
	}
	if most > before+fdBound {
		t.Fatalf("the daemon held %d descriptors during the flood, %d before; want at most %d more", most, before, fdBound)
	}
	if mostGoroutines > goroutinesBefore+goroutineBound {
		t.Fatalf("the daemon ran %d goroutines during the flood, %d before; want at most %d more", mostGoroutines, goroutinesBefore, goroutineBound)
	}
}

// rss is the daemon's resident memory in KiB.
func (d *Daemon) rss(t *testing.T) int {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if kib, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var n int
			fmt.Sscan(kib, &n)
			return n
		}
	}
	t.Fatal("no VmRSS in the daemon's status")
	return 0
}

// streamWithin runs one exec over proto, bounded by within.
func streamWithin(t *testing.T, d *Daemon, proto string, req *runtime.ExecRequest, within time.Duration, out io.Writer) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	return executor(t, proto, d.execURL(t, req)).StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: out})
}

// TestObservabilityListenersBoundedUnderFlood: 3,000 connections to the
// metrics endpoint that announce a body they never send, and 1,000 kept
// alive to pprof after a request, each reopened when closed: the daemon's
// descriptors stay within the two listeners' caps (64 each), and a scrape
// succeeds meanwhile.
func TestObservabilityListenersBoundedUnderFlood(t *testing.T) {
	const (
		metricsConns = 3000
		pprofConns   = 1000
		hold         = 10 * time.Second
		fdBound      = 2*64 + 32
	)
	raiseFDLimit(t, metricsConns+pprofConns+256)
	metricsAddr, pprofAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
	d := StartDaemon(t, WithArgs("--metrics-address", metricsAddr, "--profile-address", pprofAddr))
	httpGet(t, "http://"+metricsAddr+"/metrics")
	before := d.daemonFDs(t)

	ctx, cancel := context.WithTimeout(context.Background(), hold+60*time.Second)
	defer cancel()
	metricsFlood := startFlood(t, ctx, metricsAddr, metricsConns, func(c net.Conn) error {
		_, err := io.WriteString(c, slowBodyRequest("/metrics", metricsAddr))
		return err
	})
	defer metricsFlood.wait(t)
	pprofFlood := startFlood(t, ctx, pprofAddr, pprofConns, func(c net.Conn) error {
		if _, err := io.WriteString(c, "GET /debug/pprof/cmdline HTTP/1.1\r\nHost: "+pprofAddr+"\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close() // and the connection is kept, idle
	})
	defer pprofFlood.wait(t)
	defer cancel()
	waitFor(t, "the flood's connections", 30*time.Second, func() bool {
		return metricsFlood.opened.Load() >= metricsConns && pprofFlood.opened.Load() >= pprofConns
	})

	most := 0
	for end := time.Now().Add(hold); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		most = max(most, d.daemonFDs(t))
	}
	scraped := scrapeDuringFlood(t, "http://"+metricsAddr+"/metrics")
	t.Logf("flood: %d metrics and %d pprof connections made; daemon descriptors %d before, at most %d during; scrape: %s",
		metricsFlood.opened.Load(), pprofFlood.opened.Load(), before, most, scraped)
	if most > before+fdBound {
		t.Fatalf("the daemon held %d descriptors during the flood, %d before; want at most %d more", most, before, fdBound)
	}
	cancel()
	metricsFlood.wait(t)
	pprofFlood.wait(t)
	waitFor(t, "the daemon to close the flood's descriptors", 10*time.Second, func() bool { return d.daemonFDs(t) <= before+8 })
}

// scrapeDuringFlood scrapes url; a connection the flood pushed out before
// its request was read is tried again, three times at most, as Prometheus
// does at its next interval.
func scrapeDuringFlood(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var errs []string
	for range 3 {
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(body), "go_goroutines ") {
				return fmt.Sprintf("ok after %d failures", len(errs))
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		errs = append(errs, err.Error())
	}
	t.Fatalf("no scrape succeeded during the flood: %s", strings.Join(errs, "; "))
	return ""
}

// TestProfileSocketIsRootOnly: by default pprof is served on a
// unix socket of mode 0600, and removes it on the way out.
func TestProfileSocketIsRootOnly(t *testing.T) {
	// No flag: the default is debug.sock in the run dir.
	d := StartDaemon(t)
	sock := filepath.Join(d.RunDir, "debug.sock")
	st, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: mode %v, want a socket of mode 0600", sock, st.Mode())
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	resp, err := client.Get("http://pprof/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile:") {
		t.Fatalf("goroutine profile over the socket: %d\n%.300s", resp.StatusCode, body)
	}
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(30 * time.Second); code != 0 {
		t.Fatalf("the daemon exited %d on SIGTERM", code)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("the profile socket outlived the daemon: %v", err)
	}
}
