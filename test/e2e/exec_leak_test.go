//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/remotecommand"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestExecBackgroundSessionChildLeavesNothing runs 200 streamed execs whose
// command leaves a child in a session of its own, holding the exec's stdout
// and stderr: each exec must end shortly after its own process, and once
// they are all done the daemon must hold no more descriptors and goroutines
// than before (no pipe read end, no copy goroutine waiting for an end of
// file the child never sends).
func TestExecBackgroundSessionChildLeavesNothing(t *testing.T) {
	const (
		execs       = 200
		concurrency = 10
	)
	// About a day, and a sleep nobody else runs: not even this test in
	// another run on the same host, whose children it would count.
	seconds := 86400 + rand.IntN(1_000_000)
	sleep := fmt.Sprintf("sleep %d", seconds)
	marker := fmt.Sprintf("sleep\x00%d\x00", seconds) // its command line
	e := newExecEnv(t)
	id := e.sleeper(t, "bg")
	run := func(proto string, cmd string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := e.d.Runtime.Exec(ctx, &runtime.ExecRequest{ContainerId: id, Cmd: []string{"sh", "-c", cmd}, Stdout: true, Stderr: true})
		if err != nil {
			return err
		}
		var out lockedBuffer
		err = executor(t, proto, resp.GetUrl()).StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &out})
		if ctx.Err() != nil {
			return fmt.Errorf("exec %q over %s did not end within 10s", cmd, proto)
		}
		if err != nil {
			return err
		}
		if got := out.String(); got != "started\n" {
			return fmt.Errorf("exec %q: output %q, want %q", cmd, got, "started\n")
		}
		return nil
	}
	// Warm up: the client's and the server's first streams set up what
	// stays (connection pools, the exec spec cache).
	for _, proto := range protocols {
		if err := run(proto, "echo started"); err != nil {
			t.Fatal(err)
		}
	}
	fdsBefore, goroutinesBefore := e.d.openFDs(t), e.d.goroutines(t)

	start := time.Now()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []string
		next   = make(chan int)
	)
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := run(protocols[i%2], "setsid "+sleep+" & echo started"); err != nil {
					mu.Lock()
					failed = append(failed, err.Error())
					mu.Unlock()
				}
			}
		}()
	}
	for i := range execs {
		mu.Lock()
		stop := len(failed) >= concurrency // the point is made; keep the test short
		mu.Unlock()
		if stop {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	t.Logf("%d execs in %s, %d failed", execs, time.Since(start).Round(time.Millisecond), len(failed))
	if len(failed) > 0 {
		t.Errorf("%d execs failed, the first: %s", len(failed), failed[0])
	}
	if n := len(hostProcesses(marker)); len(failed) == 0 && n != execs {
		t.Errorf("%d background children running, want %d: the execs' own processes must not take them along", n, execs)
	}

	// Back to the baseline, give or take what the runtime keeps idle (a
	// timer, a worker): a leak is two descriptors and a goroutine or more an
	// exec, 400 and 200 here.
	const slack = 8
	var fds, goroutines int
	deadline := time.Now().Add(20 * time.Second)
	for {
		fds, goroutines = e.d.openFDs(t), e.d.goroutines(t)
		if fds <= fdsBefore+slack && goroutines <= goroutinesBefore+slack || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("daemon fds %d -> %d, goroutines %d -> %d", fdsBefore, fds, goroutinesBefore, goroutines)
	if fds > fdsBefore+slack {
		t.Errorf("daemon holds %d descriptors after the execs, %d before:\n  %s", fds, fdsBefore, strings.Join(e.d.fdTargets(), "\n  "))
	}
	if goroutines > goroutinesBefore+slack {
		t.Errorf("daemon runs %d goroutines after the execs, %d before", goroutines, goroutinesBefore)
	}

	// The children are the container's: removing the pod ends them.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.d.Runtime.StopPodSandbox(ctx, e.pod); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if err := e.d.Runtime.RemovePodSandbox(ctx, e.pod); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	waitNoProcess(t, marker, 10*time.Second)
}

// openFDs counts the daemon's open descriptors.
func (d *Daemon) openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("daemon's descriptors: %v", err)
	}
	return len(fds)
}

// fdTargets lists what the daemon's descriptors point at, for a failure.
func (d *Daemon) fdTargets() []string {
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", d.cmd.Process.Pid))
	count := map[string]int{}
	for _, fd := range fds {
		target, _ := os.Readlink(fd)
		if i := strings.IndexByte(target, '['); i > 0 {
			target = target[:i] // pipe:[123] and socket:[456] by kind
		}
		count[target]++
	}
	var out []string
	for target, n := range count {
		out = append(out, fmt.Sprintf("%4d %s", n, target))
	}
	return out
}

var goroutineReport = regexp.MustCompile(`SIGUSR1: runtime report.*goroutines=(\d+)`)

// goroutines asks the daemon for its goroutine count (SIGUSR1) and reads it
// from its log.
func (d *Daemon) goroutines(t *testing.T) int {
	t.Helper()
	before := len(goroutineReport.FindAllString(d.Output(), -1))
	d.Signal(syscall.SIGUSR1)
	deadline := time.Now().Add(5 * time.Second)
	for {
		reports := goroutineReport.FindAllStringSubmatch(d.Output(), -1)
		if len(reports) > before {
			n, _ := strconv.Atoi(reports[len(reports)-1][1])
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon logged no goroutine count within 5s of SIGUSR1")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
