package osthread

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// A child with a Pdeathsig outlives a throwaway thread (as many as there
// are idle threads to land on): it is tied to a thread that lives as long
// as it does. Started from an ordinary goroutine, the throwaway's thread
// could be the one that forked it, and its end killed the child.
func TestStartChildOutlivesThrowawayThreads(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	exited, err := StartChild(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	for range 50 {
		if err := Throwaway(func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-exited:
		t.Fatalf("the child died while throwaway threads came and went: %v", cmd.ProcessState)
	case <-time.After(100 * time.Millisecond):
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("StartChild's channel did not close 10 s after the child was killed")
	}
}
