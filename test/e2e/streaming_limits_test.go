//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/remotecommand"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// daemonFDs counts the daemon's open descriptors.
func (d *Daemon) daemonFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// raiseFDLimit lets this process hold n more descriptors.
func raiseFDLimit(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= n+1024 {
		return
	}
	old := lim
	lim.Cur = max(lim.Cur, min(n+1024, lim.Max))
	if lim.Cur < n+256 {
		t.Skipf("RLIMIT_NOFILE hard limit %d is too low for %d connections", lim.Max, n)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// TestStreamingServerShedsIdleConnections opens 2,000 connections to the
// streaming server that never become streams (half send nothing, half ask
// with a bad token and keep the connection): the daemon's descriptors stay
// within streaming.max_connections, a real exec works meanwhile over both
// protocols, and the server closes every idle connection within its
// timeouts.
func TestStreamingServerShedsIdleConnections(t *testing.T) {
	const (
		flood    = 2000
		maxConns = 256
		timeout  = 3 * time.Second
	)
	raiseFDLimit(t, flood)
	e := newExecEnv(t, WithArgs("--streaming-request-timeout", timeout.String(),
		"--streaming-idle-conn-timeout", timeout.String(), "--streaming-max-connections", fmt.Sprint(maxConns)))
	id := e.sleeper(t, "flood")
	echo := &runtime.ExecRequest{ContainerId: id, Cmd: []string{"echo", "through the flood"}, Stdout: true}
	u, err := url.Parse(e.d.execURL(t, echo))
	if err != nil {
		t.Fatal(err)
	}
	addr := u.Host
	before := e.d.daemonFDs(t)

	conns := make([]net.Conn, 0, flood)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	most := 0
	for i := range flood {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if i%2 == 1 {
			// A write to a connection the server already shed may fail: fine.
			_, _ = io.WriteString(c, "GET /exec/not-a-token HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
		}
		if i%100 == 99 {
			most = max(most, e.d.daemonFDs(t))
		}
	}
	most = max(most, e.d.daemonFDs(t))
	if limit := before + maxConns + 32; most > limit {
		t.Fatalf("the daemon held %d descriptors during the flood, %d before; want at most %d (max_connections %d)", most, before, limit, maxConns)
	}

	for _, proto := range protocols {
		var out lockedBuffer
		if err := e.d.stream(t, proto, echo, remotecommand.StreamOptions{Stdout: &out}); err != nil || out.String() != "through the flood\n" {
			t.Fatalf("exec over %s during the flood: err %v, output %q", proto, err, out.String())
		}
	}

	// Every connection of the flood is closed by the server: a read ends
	// (with the 404 first, for those that asked) before the deadline.
	deadline := time.Now().Add(2*timeout + 5*time.Second)
	open := 0
	for _, c := range conns {
		c.SetReadDeadline(deadline)
		_, err := io.Copy(io.Discard, c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			open++
		}
	}
	if open > 0 {
		t.Fatalf("%d of %d idle connections still open %v after the flood (timeouts %v)", open, flood, 2*timeout+5*time.Second, timeout)
	}
	waitFor(t, "the daemon to close the flood's descriptors", 10*time.Second, func() bool { return e.d.daemonFDs(t) <= before+8 })
}
