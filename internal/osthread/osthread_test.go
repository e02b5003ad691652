package osthread

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

func TestThrowawayRunsFnOffTheMainThread(t *testing.T) {
	boom := errors.New("boom")
	var tid int
	err := Throwaway(func() error {
		tid = unix.Gettid()
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want fn's error", err)
	}
	if tid == unix.Getpid() {
		t.Fatalf("fn ran on the main thread (tid %d)", tid)
	}
}
