package image

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// freeNow is how many slots are free.
func (u *unpackSlots) freeNow() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.free
}

// waiting is how many layers wait for a slot, all pulls together.
func (u *unpackSlots) waiting() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, q := range u.turns {
		n += len(q.waiters)
	}
	return n
}

// holdUnpackSlots takes every free slot of s, for a test to give back.
func holdUnpackSlots(s *Store) []func() {
	var held []func()
	for {
		release, ok := s.unpackSlots.try()
		if !ok {
			return held
		}
		held = append(held, release)
	}
}

// waitQueued waits until n layers wait for a slot.
func waitQueued(t *testing.T, u *unpackSlots, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for u.waiting() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d layers wait for a slot, want %d", u.waiting(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A pull that queued many layers first does not hold back a pull that
// came after it: the freed slots go to the waiting pulls in turn, each
// pull's layers in the order they came. A plain queue would serve big-1,
// big-2, big-3, small-1.
func TestUnpackSlotsGoToThePullsInTurn(t *testing.T) {
	u := newUnpackSlots(1)
	first, ok := u.try()
	if !ok {
		t.Fatal("no free slot in a new set")
	}
	type grant struct {
		name    string
		release func()
	}
	granted := make(chan grant)
	queue := func(pull any, name string, queued int) {
		go func() {
			release, err := u.wait(context.Background(), pull)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			granted <- grant{name, release}
		}()
		waitQueued(t, u, queued)
	}
	big, small := new(unpackBudget), new(unpackBudget)
	queue(big, "big-1", 1)
	queue(big, "big-2", 2)
	queue(big, "big-3", 3)
	queue(small, "small-1", 4)

	first()
	var order []string
	for range 4 {
		g := <-granted
		order = append(order, g.name)
		g.release()
	}
	if want := []string{"big-1", "small-1", "big-2", "big-3"}; !slices.Equal(order, want) {
		t.Errorf("slots granted in the order %v, want %v", order, want)
	}
	if free := u.freeNow(); free != 1 {
		t.Errorf("%d slots free after all were given back, want 1", free)
	}
}

func TestUnpackSlotsGivingUp(t *testing.T) {
	u := newUnpackSlots(1)
	release, _ := u.try()
	if _, ok := u.try(); ok {
		t.Fatal("try took a slot from a full set")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := u.wait(ctx, "pull")
		done <- err
	}()
	waitQueued(t, u, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a wait whose context ended: %v", err)
	}
	if n := u.waiting(); n != 0 {
		t.Errorf("%d waiters left after the only one gave up", n)
	}
	release()
	release() // a second call gives nothing back
	if free := u.freeNow(); free != 1 {
		t.Errorf("%d slots free, want 1", free)
	}
}

// A waiter that gives up just as a slot is handed to it passes the slot
// on: no slot is lost or made, however the two meet.
func TestUnpackSlotsKeepTheirCountWhenWaitersGiveUp(t *testing.T) {
	const slots = 2
	u := newUnpackSlots(slots)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%2 == 0 {
				go cancel()
			}
			release, err := u.wait(ctx, i%3)
			if err == nil {
				release()
			}
		})
	}
	wg.Wait()
	if free, n := u.freeNow(), u.waiting(); free != slots || n != 0 {
		t.Errorf("after the waits: %d slots free, %d waiting; want %d and 0", free, n, slots)
	}
}
