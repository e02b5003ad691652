package server

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
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
	c := newOutputBudget(5).output()
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

func TestCappedOutputsShareOneBudget(t *testing.T) {
	b := newOutputBudget(8)
	stdout, stderr := b.output(), b.output()
	stdout.Write([]byte("12345"))
	stderr.Write([]byte("abcde"))
	stdout.Write([]byte("678"))
	if got, want := string(stdout.Bytes())+"|"+string(stderr.Bytes()), "12345|abc"; got != want {
		t.Errorf("kept %q, want %q", got, want)
	}
	if stdout.Dropped() != 3 || stderr.Dropped() != 2 {
		t.Errorf("dropped %d and %d, want 3 and 2", stdout.Dropped(), stderr.Dropped())
	}
}

// TestExecSyncAnswerFitsTheKubeletsLimit: with both streams far over the
// limit, the encoded answer still fits the 16 MiB message the kubelet's CRI
// client accepts, whatever the exit code (a negative one is the longest).
func TestExecSyncAnswerFitsTheKubeletsLimit(t *testing.T) {
	const kubeletMaxMsgSize = 16 << 20 // k8s.io/cri-client's maxMsgSize
	chunk := make([]byte, 1<<20)
	for _, split := range []int{0, 1, 8 << 20, 17 << 20} {
		b := newOutputBudget(config.Default().Runtime.ExecSyncMaxOutput)
		stdout, stderr := b.output(), b.output()
		for written := 0; written < split; written += len(chunk) {
			stdout.Write(chunk)
		}
		for i := 0; i < 17; i++ {
			stderr.Write(chunk)
			stdout.Write(chunk)
		}
		resp := &runtime.ExecSyncResponse{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: -1}
		if size := proto.Size(resp); size > kubeletMaxMsgSize {
			t.Errorf("stdout first %d bytes: answer of %d bytes, over the kubelet's %d", split, size, kubeletMaxMsgSize)
		}
		if kept := len(resp.Stdout) + len(resp.Stderr); kept != config.ExecSyncOutputLimit {
			t.Errorf("stdout first %d bytes: kept %d bytes, want the whole budget %d", split, kept, config.ExecSyncOutputLimit)
		}
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
