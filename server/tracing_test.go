package server

import (
	"context"
	"fmt"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
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
			&runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: "reg.example/app:v1"},
				Auth: &runtime.AuthConfig{Username: "u", Password: secret, Auth: secret, IdentityToken: secret, RegistryToken: secret}},
			&runtime.PullImageResponse{ImageRef: "sha256:abc"},
			[]string{"minicri.image.ref=reg.example/app:v1", "minicri.image.id=sha256:abc"}},
		{"/runtime.v1.RuntimeService/CreateContainer",
			&runtime.CreateContainerRequest{PodSandboxId: "pod1", Config: &runtime.ContainerConfig{
				Image:       &runtime.ImageSpec{Image: "busybox"},
				Envs:        []*runtime.KeyValue{{Key: "TOKEN", Value: []byte(secret)}},
				Command:     []string{"sh", "-c", "echo " + secret},
				Labels:      map[string]string{"l": secret},
				Annotations: map[string]string{"a": secret},
			}},
			&runtime.CreateContainerResponse{ContainerId: "ctr1"},
			[]string{"minicri.pod_sandbox.id=pod1", "minicri.image.ref=busybox", "minicri.container.id=ctr1"}},
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
