package broadcast

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
)

// drain reads everything left in a subscription until it is closed.
func drain[T any](t *testing.T, s *Subscription[T]) []T {
	t.Helper()
	var got []T
	timeout := time.After(5 * time.Second)
	for {
		select {
		case v, ok := <-s.C():
			if !ok {
				return got
			}
			got = append(got, v)
		case <-timeout:
			t.Fatalf("subscription not closed after 5s; received %v", got)
		}
	}
}

func TestSendKeepsOrderForEverySubscriber(t *testing.T) {
	var h Hub[int]
	a := h.Subscribe(context.Background(), 100)
	b := h.Subscribe(context.Background(), 100)
	for i := range 50 {
		h.Send(i)
	}
	h.Close()
	for name, s := range map[string]*Subscription[int]{"a": a, "b": b} {
		got := drain(t, s)
		if len(got) != 50 {
			t.Fatalf("subscriber %s got %d values, want 50", name, len(got))
		}
		for i, v := range got {
			if v != i {
				t.Fatalf("subscriber %s: value %d = %d, want %d (order not kept): %v", name, i, v, i, got)
			}
		}
		if !errors.Is(s.Err(), ErrClosed) {
			t.Errorf("subscriber %s: Err = %v, want ErrClosed", name, s.Err())
		}
	}
}

func TestSlowSubscriberIsDroppedNotWaitedFor(t *testing.T) {
	var h Hub[int]
	slow := h.Subscribe(context.Background(), 2)
	fast := h.Subscribe(context.Background(), 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 10 {
			h.Send(i) // must never block, whoever does not read
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Send blocked on a subscriber that does not read")
	}
	if got := drain(t, slow); len(got) != 2 || got[0] != 0 || got[1] != 1 {
		t.Errorf("slow subscriber got %v, want the 2 values that fitted its buffer", got)
	}
	if !errors.Is(slow.Err(), ErrSlow) {
		t.Errorf("slow subscriber Err = %v, want ErrSlow", slow.Err())
	}
	if fast.Err() != nil {
		t.Errorf("fast subscriber ended too: %v", fast.Err())
	}
	h.Send(10)
	fast.Close()
	if got := drain(t, fast); len(got) != 11 {
		t.Errorf("fast subscriber got %d values, want 11: %v", len(got), got)
	}
	if h.Active() {
		t.Error("hub still has subscribers after both ended")
	}
}

func TestContextCancelUnsubscribes(t *testing.T) {
	var h Hub[int]
	ctx, cancel := context.WithCancel(context.Background())
	s := h.Subscribe(ctx, 10)
	if !h.Active() {
		t.Fatal("no subscriber after Subscribe")
	}
	cancel()
	drain(t, s)
	if !errors.Is(s.Err(), context.Canceled) {
		t.Errorf("Err = %v, want context.Canceled", s.Err())
	}
	if h.Active() {
		t.Error("subscriber still registered after its context ended")
	}
	h.Send(1) // nobody left: nothing to do, nothing to panic on
	s.Close() // after the end: a no-op
}

func TestSubscribeAfterCloseEndsAtOnce(t *testing.T) {
	var h Hub[int]
	h.Close()
	s := h.Subscribe(context.Background(), 1)
	if got := drain(t, s); len(got) != 0 || !errors.Is(s.Err(), ErrClosed) {
		t.Fatalf("got %v, Err %v; want nothing and ErrClosed", got, s.Err())
	}
}

func TestNoGoroutineLeftBySubscriptions(t *testing.T) {
	before := runtime.NumGoroutine()
	var h Hub[int]
	var wg sync.WaitGroup
	for i := range 200 {
		ctx, cancel := context.WithCancel(context.Background())
		s := h.Subscribe(ctx, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range s.C() {
			}
		}()
		h.Send(i)
		switch i % 3 {
		case 0:
			cancel()
		case 1:
			s.Close()
			cancel()
		default:
			h.Send(i) // may overflow: dropped as slow
			s.Close()
			cancel()
		}
	}
	wg.Wait()
	if h.Active() {
		t.Fatal("subscribers left in the hub")
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before: subscriptions leave goroutines behind", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConcurrentSendAndSubscribe(t *testing.T) {
	var h Hub[int]
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				h.Send(i)
			}
		}()
		go func() {
			defer wg.Done()
			for range 100 {
				ctx, cancel := context.WithCancel(context.Background())
				s := h.Subscribe(ctx, 4)
				cancel()
				for range s.C() {
				}
			}
		}()
	}
	wg.Wait()
}
