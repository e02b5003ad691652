package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The CRI call's span names the objects of the call and what it made, and
// nothing of a request's credentials, environment, command, labels or
// annotations.
func TestTracingInterceptorNamesIDsOnly(t *testing.T) {
	const secret = "s3cr3t-value"
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	intercept := TracingUnaryInterceptor()
	calls := []struct {
		method    string
		req, resp any
		want      []string // attribute=value, each present
	}{
		{"/runtime.v1.ImageService/PullImage",
			&runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: "reg.example/" + secret + ":v1"},
				Auth: &runtime.AuthConfig{Username: "u", Password: secret, Auth: secret, IdentityToken: secret, RegistryToken: secret}},
			&runtime.PullImageResponse{ImageRef: "sha256:abc"},
			[]string{"minicri.image.id=sha256:abc"}},
		{"/runtime.v1.RuntimeService/CreateContainer",
			&runtime.CreateContainerRequest{PodSandboxId: "pod1", Config: &runtime.ContainerConfig{
				Image:       &runtime.ImageSpec{Image: "reg.example/" + secret},
				Mounts:      []*runtime.Mount{{HostPath: "/" + secret, ContainerPath: "/" + secret}},
				Args:        []string{secret},
				Envs:        []*runtime.KeyValue{{Key: "TOKEN", Value: []byte(secret)}},
				Command:     []string{"sh", "-c", "echo " + secret},
				Labels:      map[string]string{"l": secret},
				Annotations: map[string]string{"a": secret},
			}},
			&runtime.CreateContainerResponse{ContainerId: "ctr1"},
			[]string{"minicri.pod_sandbox.id=pod1", "minicri.container.id=ctr1"}},
		{"/runtime.v1.RuntimeService/RunPodSandbox",
			&runtime.RunPodSandboxRequest{RuntimeHandler: "runc", Config: &runtime.PodSandboxConfig{
				Metadata: &runtime.PodSandboxMetadata{Name: "web", Namespace: "prod"},
				Labels:   map[string]string{"l": secret}, Annotations: map[string]string{"a": secret}}},
			&runtime.RunPodSandboxResponse{PodSandboxId: "pod2"},
			[]string{"k8s.pod.name=web", "k8s.namespace.name=prod", "minicri.runtime.handler=runc", "minicri.pod_sandbox.id=pod2"}},
		{"/runtime.v1.RuntimeService/ExecSync",
			&runtime.ExecSyncRequest{ContainerId: "ctr1", Cmd: []string{"sh", "-c", "echo " + secret}},
			&runtime.ExecSyncResponse{ExitCode: 3, Stdout: []byte(secret)},
			[]string{"minicri.container.id=ctr1", "process.exit.code=3"}},
	}
	for _, c := range calls {
		ctx, span := tracer.Start(context.Background(), c.method)
		_, err := intercept(ctx, c.req, &grpc.UnaryServerInfo{FullMethod: c.method}, func(context.Context, any) (any, error) { return c.resp, nil })
		span.End()
		if err != nil {
			t.Fatal(err)
		}
	}
	ended := rec.Ended()
	if len(ended) != len(calls) {
		t.Fatalf("%d spans, want %d", len(ended), len(calls))
	}
	for i, s := range ended {
		var got []string
		for _, kv := range s.Attributes() {
			got = append(got, fmt.Sprintf("%s=%s", kv.Key, kv.Value.Emit()))
		}
		all := strings.Join(got, " ")
		if strings.Contains(all, secret) {
			t.Errorf("%s: span attributes carry a secret: %s", calls[i].method, all)
		}
		for _, w := range calls[i].want {
			if !strings.Contains(" "+all+" ", " "+w+" ") {
				t.Errorf("%s: attributes %s lack %s", calls[i].method, all, w)
			}
		}
	}
}

// On a call that is not sampled, the interceptor adds nothing.
func TestTracingInterceptorSkipsUnsampledCalls(t *testing.T) {
	called := false
	_, err := TracingUnaryInterceptor()(context.Background(), &runtime.VersionRequest{}, &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/Version"},
		func(context.Context, any) (any, error) { called = true; return &runtime.VersionResponse{}, nil })
	if err != nil || !called {
		t.Fatalf("handler called %v, err %v", called, err)
	}
}

// recordingStats keeps the errors of the ends it is handed.
type recordingStats struct {
	stats.Handler
	ends []error
}

func (r *recordingStats) HandleRPC(_ context.Context, rs stats.RPCStats) {
	if end, ok := rs.(*stats.End); ok {
		r.ends = append(r.ends, end.Error)
	}
}

// The gRPC instrumentation sees a failed call's code, never its message:
// that quotes the request (here, as runc says it, argv[0]).
func TestTracingStatsHandlerPassesCodesOnly(t *testing.T) {
	rec := &recordingStats{}
	h := TracingStatsHandler(rec)
	for _, err := range []error{
		status.Error(codes.Unknown, `exec: "/TOKCMD-db-password=hunter2": no such file`),
		status.Error(codes.Internal, "mount /host/secret-path: permission denied"),
		errors.New("plain error naming /secret"),
		nil,
	} {
		h.HandleRPC(context.Background(), &stats.End{Error: err})
	}
	want := []string{"rpc error: code = Unknown desc = Unknown", "rpc error: code = Internal desc = Internal", "rpc error: code = Unknown desc = Unknown", "<nil>"}
	for i, err := range rec.ends {
		if got := fmt.Sprint(err); got != want[i] {
			t.Errorf("end %d handed on as %q, want %q", i, got, want[i])
		}
	}
}
