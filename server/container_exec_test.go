package server

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/server/validate"
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
			if !errors.Is(err, validate.ErrInvalid) || !bytes.Contains([]byte(err.Error()), []byte(tt.wantField)) {
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

func TestFitOutputs(t *testing.T) {
	cases := []struct {
		name                   string
		stdout, stderr         int // bytes written
		keptOut, keptErr, drop int
	}{
		{"both fit", 4, 5, 4, 5, 0},
		{"stdout alone too big", 15, 0, 10, 0, 5},
		{"stderr alone too big", 0, 15, 0, 10, 5},
		{"short stdout leaves the rest to stderr", 2, 15, 2, 8, 7},
		{"short stderr leaves the rest to stdout", 15, 3, 7, 3, 8},
		{"both too big: half each", 15, 15, 5, 5, 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr := &cappedOutput{limit: 100}, &cappedOutput{limit: 100}
			stdout.Write(make([]byte, c.stdout))
			stderr.Write(make([]byte, c.stderr))
			fitOutputs(stdout, stderr, 10)
			if stdout.Len() != c.keptOut || stderr.Len() != c.keptErr {
				t.Errorf("kept %d and %d, want %d and %d", stdout.Len(), stderr.Len(), c.keptOut, c.keptErr)
			}
			if got := stdout.Dropped() + stderr.Dropped(); got != int64(c.drop) {
				t.Errorf("dropped %d, want %d", got, c.drop)
			}
		})
	}
}

// TestExecSyncAnswerFitsTheKubeletsLimit: with both streams far over the
// limit, the encoded answer still fits the 16 MiB message the kubelet's CRI
// client accepts, whatever the exit code (a negative one is the longest).
func TestExecSyncAnswerFitsTheKubeletsLimit(t *testing.T) {
	const kubeletMaxMsgSize = 16 << 20 // k8s.io/cri-client's maxMsgSize
	chunk := make([]byte, 1<<20)
	for _, split := range []int{0, 1, 8 << 20, 17 << 20} {
		limit := min(config.Default().Runtime.ExecSyncMaxOutput, config.ExecSyncOutputLimit)
		stdout, stderr := &cappedOutput{limit: limit}, &cappedOutput{limit: limit}
		for written := 0; written < split; written += len(chunk) {
			stdout.Write(chunk)
		}
		for i := 0; i < 17; i++ {
			stderr.Write(chunk)
			stdout.Write(chunk)
		}
		fitOutputs(stdout, stderr, config.ExecSyncOutputLimit)
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
