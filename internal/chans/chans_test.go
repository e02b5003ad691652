package chans

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestEach(t *testing.T) {
	tests := []struct {
		name    string
		in      []int
		closeIn bool
		done    bool
		stopAt  int // fn returns false for this value; 0: never
		want    []int
	}{
		{name: "until in is closed", in: []int{1, 2, 3}, closeIn: true, want: []int{1, 2, 3}},
		{name: "until fn says stop", in: []int{1, 2, 3}, stopAt: 2, want: []int{1, 2}},
		{name: "done first", in: nil, done: true, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := make(chan int, len(tc.in))
			for _, v := range tc.in {
				in <- v
			}
			if tc.closeIn {
				close(in)
			}
			done := make(chan struct{})
			if tc.done {
				close(done)
			}
			var got []int
			Each(in, done, func(v int) bool {
				got = append(got, v)
				return v != tc.stopAt
			})
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWaitClosed(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	if !WaitClosed(context.Background(), closed, time.Hour) {
		t.Error("a closed channel: WaitClosed = false, want true")
	}
	if WaitClosed(context.Background(), make(chan struct{}), time.Millisecond) {
		t.Error("an open channel past the timeout: WaitClosed = true, want false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if WaitClosed(ctx, make(chan struct{}), time.Hour) {
		t.Error("an open channel, ctx done: WaitClosed = true, want false")
	}
}
