package server

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/internal/tracing"
)

// TracingUnaryInterceptor names on each CRI call's span (which the gRPC
// instrumentation started, named after the RPC) the objects the call is
// about: the pod's and container's IDs, the runtime handler, the pod's
// name and namespace, and what the call made (a new ID, the pulled
// image's ID, an ExecSync's exit code). Nothing else of a request: never
// its auth, an image reference, a container's command, arguments,
// environment, mounts, labels or annotations (docs/security.md). The
// daemon chains it only when tracing is on; on an unsampled call it does
// nothing.
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
	if r, ok := req.(*runtime.RunPodSandboxRequest); ok {
		md := r.GetConfig().GetMetadata()
		attrs = append(attrs, tracing.PodName.String(md.GetName()), tracing.PodNamespace.String(md.GetNamespace()),
			tracing.Handler.String(r.GetRuntimeHandler()))
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

// TracingStatsHandler is the gRPC instrumentation h that sees of each
// failed call its code alone: otelgrpc writes the message of a call that
// ended Unknown or Internal into its span's status, and that message
// quotes the request (runc's error names argv[0], a mount's its host
// path, a registry's the image). The span's status then says the code's
// name, and its rpc.grpc.status_code attribute the code.
func TracingStatsHandler(h stats.Handler) stats.Handler { return codeOnlyStats{h} }

type codeOnlyStats struct{ stats.Handler }

func (h codeOnlyStats) HandleRPC(ctx context.Context, rs stats.RPCStats) {
	if end, ok := rs.(*stats.End); ok && end.Error != nil {
		code := status.Code(end.Error)
		stripped := *end
		stripped.Error = status.Error(code, code.String())
		rs = &stripped
	}
	h.Handler.HandleRPC(ctx, rs)
}
