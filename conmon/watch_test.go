package conmon_test

import (
	"runtime"
	"testing"
	"time"
)

// TestWatchesShareOneGoroutine: the daemon watches every container it
// runs; the watches wait in one goroutine, not in one (or two) for each
// container, whose stacks were a MiB of the daemon at 100 pods. Each watch
// still ends with its own container only.
func TestWatchesShareOneGoroutine(t *testing.T) {
	joinDir, first := runSharedMonitor(t)
	var ctrs []*container
	for i := 0; i < 5; i++ {
		c := newContainer(t, []string{"sleep", "1000"}, nil)
		c.join(joinDir)
		ctrs = append(ctrs, c)
	}
	// The watcher's own goroutine starts with the first watch.
	firstDone, err := watchContainer(first.opts.SocketDir)
	if err != nil {
		t.Fatalf("WatchContainer: %v", err)
	}
	before := runtime.NumGoroutine()
	var dones []<-chan struct{}
	for _, c := range ctrs {
		done, err := watchContainer(c.opts.SocketDir)
		if err != nil {
			t.Fatalf("WatchContainer: %v", err)
		}
		dones = append(dones, done)
	}
	if got := runtime.NumGoroutine(); got > before {
		t.Errorf("%d watches took %d goroutines more, want none", len(ctrs), got-before)
	}
	ctrs[2].runc("kill", ctrs[2].id, "KILL")
	select {
	case <-dones[2]:
	case <-time.After(20 * time.Second):
		t.Fatalf("the watch of the killed container did not end")
	}
	time.Sleep(100 * time.Millisecond)
	for i, done := range append(dones, firstDone) {
		select {
		case <-done:
			if i != 2 {
				t.Errorf("the watch of running container %d ended with container 2's", i)
			}
		default:
		}
	}
}
