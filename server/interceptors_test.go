package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/conmon"
	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/server/validate"
	"github.com/minicri/minicri/store"
)

func quietLog() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return logrus.NewEntry(l)
}

func TestPanicInHandlerBecomesInternal(t *testing.T) {
	intercept := UnaryInterceptor(quietLog())
	info := &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/StopContainer"}
	panicking := func(ctx context.Context, req any) (any, error) { panic("boom") }

	_, err := intercept(context.Background(), &runtime.StopContainerRequest{ContainerId: "c1"}, info, panicking)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "StopContainer") {
		t.Fatalf("error = %v, want Internal naming the RPC and the panic", err)
	}
}

func TestRequestIDsForLogs(t *testing.T) {
	fields := requestIDs(&runtime.CreateContainerRequest{PodSandboxId: "p1"})
	if fields["pod"] != "p1" {
		t.Errorf("fields = %v, want pod p1", fields)
	}
	fields = requestIDs(&runtime.StopContainerRequest{ContainerId: "c1"})
	if fields["container"] != "c1" {
		t.Errorf("fields = %v, want container c1", fields)
	}
}

func TestToStatus(t *testing.T) {
	cases := []struct {
		err  error
		want codes.Code
	}{
		{validate.Invalidf("config.metadata.name", "must not be empty"), codes.InvalidArgument},
		{fmt.Errorf("read record: %w", os.ErrNotExist), codes.NotFound},
		{fmt.Errorf("exec: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{status.Error(codes.AlreadyExists, "taken"), codes.AlreadyExists},
		{fmt.Errorf("write record: %w", syscall.ENOSPC), codes.ResourceExhausted},
		// minicri's sentinel wins over the system error it wraps.
		{fmt.Errorf("%w: dial monitor: %w", conmon.ErrNotRunning, os.ErrNotExist), codes.FailedPrecondition},
		{fmt.Errorf("%w: open blob: %w", image.ErrNotFound, syscall.EROFS), codes.NotFound},
		{errors.New("disk on fire"), codes.Internal},
	}
	for _, c := range cases {
		if got := status.Code(toStatus(c.err)); got != c.want {
			t.Errorf("toStatus(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if toStatus(nil) != nil {
		t.Error("toStatus(nil) is not nil")
	}
}

// TestMarkedErrorsKeepTheirMessage: a sentinel gives the code, and the
// client reads the handler's message without the sentinel's text.
func TestMarkedErrorsKeepTheirMessage(t *testing.T) {
	refused := fmt.Errorf("mirror a: %w; mirror b: %w", image.ErrNotFound, image.ErrUnavailable)
	cases := []struct {
		name string
		st   error
		want codes.Code
		msg  string
	}{
		{"wrong state", toStatus(markf(errWrongState, "container %s is %s, not created", "c1", "running")),
			codes.FailedPrecondition, "container c1 is running, not created"},
		{"name taken", toStatus(markf(store.ErrNameReserved, "pod sandbox %s is already taken by sandbox %s", "p", "s1")),
			codes.AlreadyExists, "pod sandbox p is already taken by sandbox s1"},
		{"pull of a registry that is down", pullStatus(refused), codes.Unavailable, refused.Error()},
		{"pull of a missing image", pullStatus(fmt.Errorf("pull: %w", image.ErrNotFound)), codes.NotFound, "pull: " + image.ErrNotFound.Error()},
		{"pull with no code of its own", pullStatus(errors.New("bad certificate")), codes.Unknown, "bad certificate"},
	}
	for _, c := range cases {
		st, _ := status.FromError(c.st)
		if st.Code() != c.want || st.Message() != c.msg {
			t.Errorf("%s: %v %q, want %v %q", c.name, st.Code(), st.Message(), c.want, c.msg)
		}
	}
	if pullStatus(nil) != nil {
		t.Error("pullStatus(nil) is not nil")
	}
}

// TestLogCallLevels: a call is logged at the level its outcome deserves,
// with the IDs it names, and not at all below the logger's level.
func TestLogCallLevels(t *testing.T) {
	req := &runtime.StopContainerRequest{ContainerId: "c1"}
	tests := []struct {
		name      string
		level     logrus.Level
		err       error
		wantLevel string // "" for no line
	}{
		{"success at info", logrus.InfoLevel, nil, ""},
		{"success at debug", logrus.DebugLevel, nil, "debug"},
		{"the caller's mistake", logrus.InfoLevel, status.Error(codes.NotFound, "no such container"), "info"},
		{"the caller's mistake at warning", logrus.WarnLevel, status.Error(codes.InvalidArgument, "bad"), ""},
		{"an internal error", logrus.WarnLevel, errors.New("disk on fire"), "error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			l := logrus.New()
			l.SetOutput(&out)
			l.SetLevel(tc.level)
			l.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true})
			logCall(logrus.NewEntry(l), "/runtime.v1.RuntimeService/StopContainer", req, time.Millisecond, tc.err)
			got := out.String()
			if tc.wantLevel == "" {
				if got != "" {
					t.Fatalf("logged %q, want nothing", got)
				}
				return
			}
			if !strings.Contains(got, "level="+tc.wantLevel) || !strings.Contains(got, "container=c1") || !strings.Contains(got, "StopContainer") {
				t.Fatalf("logged %q, want a %s line naming the method and container c1", got, tc.wantLevel)
			}
		})
	}
}
