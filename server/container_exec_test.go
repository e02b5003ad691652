package server

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/minicri/minicri/streaming"
)

func TestValidateStreams(t *testing.T) {
	tests := []struct {
		name                       string
		stdin, stdout, stderr, tty bool
		wantField                  string
	}{
		{"stdout only", false, true, false, false, ""},
		{"tty with stdin and stdout", true, true, false, true, ""},
		{"no stream", false, false, false, false, "stdin"},
		{"tty and stderr", true, true, true, true, "stderr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateStreams(tt.stdin, tt.stdout, tt.stderr, tt.tty)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("err = %v, want none", err)
				}
				return
			}
			if !errors.Is(err, errInvalid) || !bytes.Contains([]byte(err.Error()), []byte(tt.wantField)) {
				t.Errorf("err = %v, want an invalid argument naming %s", err, tt.wantField)
			}
		})
	}
}

func TestCappedOutputKeepsTheFirstBytes(t *testing.T) {
	c := &cappedOutput{limit: 5}
	for _, s := range []string{"abc", "defg", "hij"} {
		if n, err := c.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v: a full writer must not fail the copy", s, n, err)
		}
	}
	if got := string(c.Bytes()); got != "abcde" {
		t.Errorf("kept %q, want abcde", got)
	}
	if got := c.Dropped(); got != 5 {
		t.Errorf("dropped %d, want 5", got)
	}
}

func TestResizeForwardersEndWithTheirExec(t *testing.T) {
	in := make(chan streaming.TerminalSize)
	out, stop := ociResizes(in)
	go func() { in <- streaming.TerminalSize{Width: 80, Height: 24} }()
	if got := <-out; got.Width != 80 || got.Height != 24 {
		t.Errorf("forwarded %+v", got)
	}
	stop()
	select {
	case _, ok := <-out:
		if ok {
			t.Error("a size came after stop")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the forwarder did not end after stop, with the client's stream still open")
	}

	in2 := make(chan streaming.TerminalSize)
	mout, mstop := monitorResizes(in2)
	close(in2) // the client's resize stream ended
	select {
	case _, ok := <-mout:
		if ok {
			t.Error("a size came from a closed stream")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the monitor forwarder did not end with its input")
	}
	mstop()
}
