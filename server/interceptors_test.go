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

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
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
		{invalidf("config.metadata.name", "must not be empty"), codes.InvalidArgument},
		{fmt.Errorf("read record: %w", os.ErrNotExist), codes.NotFound},
		{fmt.Errorf("exec: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{status.Error(codes.AlreadyExists, "taken"), codes.AlreadyExists},
		{fmt.Errorf("write record: %w", syscall.ENOSPC), codes.ResourceExhausted},
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
