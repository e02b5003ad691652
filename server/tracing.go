package server

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/internal/tracing"
)

// TracingUnaryInterceptor names on each CRI call's span (which the gRPC
// instrumentation started, named after the RPC) the objects the call is
// about: the pod's and container's IDs, the image reference, the runtime
// handler, the pod's name and namespace, and what the call made (a new
// ID, the pulled image's ID, an ExecSync's exit code). Nothing else of a
// request: never its auth, a container's environment, labels or
// annotations (docs/security.md). The daemon chains it only when tracing
// is on; on an unsampled call it does nothing.
func TracingUnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		span := trace.SpanFromContext(ctx)
		if !span.IsRecording() {
			return handler(ctx, req)
		}
		span.SetAttributes(requestAttributes(req)...)
		resp, err := handler(ctx, req)
		if err == nil {
			span.SetAttributes(responseAttributes(resp)...)
		}
		return resp, err
	}
}

// requestAttributes are the IDs and names a request gives.
func requestAttributes(req any) []attribute.KeyValue {
	var attrs []attribute.KeyValue
	if r, ok := req.(interface{ GetPodSandboxId() string }); ok && r.GetPodSandboxId() != "" {
		attrs = append(attrs, tracing.PodID.String(r.GetPodSandboxId()))
	}
	if r, ok := req.(interface{ GetContainerId() string }); ok && r.GetContainerId() != "" {
		attrs = append(attrs, tracing.ContainerID.String(r.GetContainerId()))
	}
	if r, ok := req.(interface{ GetImage() *runtime.ImageSpec }); ok && r.GetImage().GetImage() != "" {
		attrs = append(attrs, tracing.ImageRef.String(r.GetImage().GetImage()))
	}
	switch r := req.(type) {
	case *runtime.RunPodSandboxRequest:
		md := r.GetConfig().GetMetadata()
		attrs = append(attrs, tracing.PodName.String(md.GetName()), tracing.PodNamespace.String(md.GetNamespace()),
			tracing.Handler.String(r.GetRuntimeHandler()))
	case *runtime.CreateContainerRequest:
		attrs = append(attrs, tracing.ImageRef.String(r.GetConfig().GetImage().GetImage()))
	}
	return attrs
}

// responseAttributes are what a call made or found.
func responseAttributes(resp any) []attribute.KeyValue {
	switch r := resp.(type) {
	case *runtime.RunPodSandboxResponse:
		return []attribute.KeyValue{tracing.PodID.String(r.GetPodSandboxId())}
	case *runtime.CreateContainerResponse:
		return []attribute.KeyValue{tracing.ContainerID.String(r.GetContainerId())}
	case *runtime.PullImageResponse:
		return []attribute.KeyValue{tracing.ImageID.String(r.GetImageRef())}
	case *runtime.ExecSyncResponse:
		return []attribute.KeyValue{tracing.ExitCode.Int(int(r.GetExitCode()))}
	}
	return nil
}
