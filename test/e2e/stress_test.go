//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	stressPods       = 20
	stressContainers = 2
	stressWorkers    = 8
	stressStepLimit  = 30 * time.Second // every call of the test has this deadline
)

// TestStressPodsFromManyGoroutines runs 20 pods of 2 containers each on the
// CNI bridge from 8 goroutines at once, each pod created, exec'd into,
// stopped and removed, while another goroutine lists everything as the
// kubelet does every second. No call may fail, and nothing may be left.
func TestStressPodsFromManyGoroutines(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	d.bridgeNetwork(t)
	t.Cleanup(func() { d.removeAll(t) }) // what a failed worker left, before the IP check

	start := time.Now()
	jobs := make(chan int, stressPods)
	for i := range stressPods {
		jobs <- i
	}
	close(jobs)
	var (
		errs      = make(chan error, stressPods*8)
		execMiss  atomic.Bool
		workers   sync.WaitGroup
		listing   = make(chan struct{})
		listerEnd = make(chan struct{})
	)
	go func() {
		defer close(listerEnd)
		d.listUntil(listing, errs)
	}()
	for range stressWorkers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := range jobs {
				if err := d.stressPod(i, ref, &execMiss); err != nil {
					errs <- fmt.Errorf("pod %d: %w", i, err)
				}
			}
		}()
	}
	workers.Wait()
	close(listing)
	<-listerEnd
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d pods × %d containers from %d goroutines in %s", stressPods, stressContainers, stressWorkers, time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), stressStepLimit)
	defer cancel()
	if pods, err := d.Runtime.ListPodSandbox(ctx, nil); err != nil || len(pods) != 0 {
		t.Errorf("after the stress: %d sandboxes listed (%v), want none", len(pods), err)
	}
	d.assertNoLeaks(t, leakCheck{})
	if execMiss.Load() {
		t.Skip("everything else passed; the exec part waits for ExecSync")
	}
}

// stressPod makes one pod with its containers, execs into each, and stops
// and removes it, every call under its own deadline.
func (d *Daemon) stressPod(i int, ref string, execMiss *atomic.Bool) error {
	cfg := d.podConfig(fmt.Sprintf("stress-%d", i))
	var pod string
	if err := step(func(ctx context.Context) (err error) {
		pod, err = d.Runtime.RunPodSandbox(ctx, cfg, "")
		return err
	}); err != nil {
		return fmt.Errorf("RunPodSandbox: %w", err)
	}
	for c := range stressContainers {
		name := fmt.Sprintf("c%d", c)
		var id string
		if err := step(func(ctx context.Context) (err error) {
			id, err = d.Runtime.CreateContainer(ctx, pod, runningContainer(name, ref), cfg)
			return err
		}); err != nil {
			return fmt.Errorf("CreateContainer %s: %w", name, err)
		}
		if err := step(func(ctx context.Context) error { return d.Runtime.StartContainer(ctx, id) }); err != nil {
			return fmt.Errorf("StartContainer %s: %w", name, err)
		}
		if err := d.stressExec(id, cfg.GetHostname(), execMiss); err != nil {
			return fmt.Errorf("exec in %s: %w", name, err)
		}
	}
	if err := step(func(ctx context.Context) error { return d.Runtime.StopPodSandbox(ctx, pod) }); err != nil {
		return fmt.Errorf("StopPodSandbox: %w", err)
	}
	if err := step(func(ctx context.Context) error { return d.Runtime.RemovePodSandbox(ctx, pod) }); err != nil {
		return fmt.Errorf("RemovePodSandbox: %w", err)
	}
	return nil
}

// stressExec checks that an exec in the container runs in its pod.
func (d *Daemon) stressExec(id, hostname string, execMiss *atomic.Bool) error {
	return step(func(ctx context.Context) error {
		out, _, err := d.Runtime.ExecSync(ctx, id, []string{"hostname"}, 10*time.Second)
		if status.Code(err) == codes.Unimplemented {
			execMiss.Store(true)
			return nil
		}
		if err != nil {
			return err
		}
		if got := strings.TrimSpace(string(out)); got != hostname {
			return fmt.Errorf("hostname %q, want %q", got, hostname)
		}
		return nil
	})
}

// listUntil lists sandboxes and containers, as the kubelet's relist does,
// until done is closed.
func (d *Daemon) listUntil(done <-chan struct{}, errs chan<- error) {
	for {
		select {
		case <-done:
			return
		case <-time.After(50 * time.Millisecond):
		}
		err := step(func(ctx context.Context) error {
			if _, err := d.Runtime.ListPodSandbox(ctx, nil); err != nil {
				return err
			}
			_, err := d.Runtime.ListContainers(ctx, nil)
			return err
		})
		if err != nil {
			errs <- fmt.Errorf("list: %w", err)
			return
		}
	}
}

// step runs one call under the stress test's deadline.
func step(call func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), stressStepLimit)
	defer cancel()
	err := call(ctx)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s: %w", stressStepLimit, err)
	}
	return err
}
