package server

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The Stream RPCs (KEP-5825, the kubelet's CRIListStreaming gate) answer
// what their List twins answer, cut into batches, so that a node with many
// pods never meets gRPC's message size limit (16 MiB, the daemon's and the
// kubelet's). Each one asks its List twin: the same filters, the same
// errors. The
// kubelet gathers the whole stream before it looks at any item, so sending
// the first batch before the last is read gains it nothing.
const (
	// streamBatchItems bounds the items of one response. containerd sends
	// 5000; a smaller batch keeps each message, and the memory grpc holds
	// for it, small.
	streamBatchItems = 100
	// streamBatchBytes bounds a response's encoded size: an item may carry
	// 256 KiB of annotations, and 100 of those would pass the 16 MiB limit.
	// An item larger than this goes alone.
	streamBatchBytes = 4 << 20
)

// StreamPodSandboxes streams ListPodSandbox's answer.
func (s *Server) StreamPodSandboxes(req *runtime.StreamPodSandboxesRequest, stream runtime.RuntimeService_StreamPodSandboxesServer) error {
	resp, err := s.ListPodSandbox(stream.Context(), &runtime.ListPodSandboxRequest{Filter: req.GetFilter()})
	if err != nil {
		return err
	}
	return sendBatches(stream, "pod sandboxes", resp.GetItems(), func(b []*runtime.PodSandbox) *runtime.StreamPodSandboxesResponse {
		return &runtime.StreamPodSandboxesResponse{PodSandboxes: b}
	})
}

// StreamContainers streams ListContainers' answer.
func (s *Server) StreamContainers(req *runtime.StreamContainersRequest, stream runtime.RuntimeService_StreamContainersServer) error {
	resp, err := s.ListContainers(stream.Context(), &runtime.ListContainersRequest{Filter: req.GetFilter()})
	if err != nil {
		return err
	}
	return sendBatches(stream, "containers", resp.GetContainers(), func(b []*runtime.Container) *runtime.StreamContainersResponse {
		return &runtime.StreamContainersResponse{Containers: b}
	})
}

// StreamContainerStats streams ListContainerStats' answer.
func (s *Server) StreamContainerStats(req *runtime.StreamContainerStatsRequest, stream runtime.RuntimeService_StreamContainerStatsServer) error {
	resp, err := s.ListContainerStats(stream.Context(), &runtime.ListContainerStatsRequest{Filter: req.GetFilter()})
	if err != nil {
		return err
	}
	return sendBatches(stream, "container stats", resp.GetStats(), func(b []*runtime.ContainerStats) *runtime.StreamContainerStatsResponse {
		return &runtime.StreamContainerStatsResponse{ContainerStats: b}
	})
}

// StreamPodSandboxStats streams ListPodSandboxStats' answer.
func (s *Server) StreamPodSandboxStats(req *runtime.StreamPodSandboxStatsRequest, stream runtime.RuntimeService_StreamPodSandboxStatsServer) error {
	resp, err := s.ListPodSandboxStats(stream.Context(), &runtime.ListPodSandboxStatsRequest{Filter: req.GetFilter()})
	if err != nil {
		return err
	}
	return sendBatches(stream, "pod sandbox stats", resp.GetStats(), func(b []*runtime.PodSandboxStats) *runtime.StreamPodSandboxStatsResponse {
		return &runtime.StreamPodSandboxStatsResponse{PodSandboxStats: b}
	})
}

// StreamPodSandboxMetrics streams ListPodSandboxMetrics' answer.
func (s *Server) StreamPodSandboxMetrics(req *runtime.StreamPodSandboxMetricsRequest, stream runtime.RuntimeService_StreamPodSandboxMetricsServer) error {
	resp, err := s.ListPodSandboxMetrics(stream.Context(), &runtime.ListPodSandboxMetricsRequest{})
	if err != nil {
		return err
	}
	return sendBatches(stream, "pod sandbox metrics", resp.GetPodMetrics(), func(b []*runtime.PodSandboxMetrics) *runtime.StreamPodSandboxMetricsResponse {
		return &runtime.StreamPodSandboxMetricsResponse{PodSandboxMetrics: b}
	})
}

// StreamImages streams ListImages' answer.
func (s *Server) StreamImages(req *runtime.StreamImagesRequest, stream runtime.ImageService_StreamImagesServer) error {
	resp, err := s.ListImages(stream.Context(), &runtime.ListImagesRequest{Filter: req.GetFilter()})
	if err != nil {
		return err
	}
	return sendBatches(stream, "images", resp.GetImages(), func(b []*runtime.Image) *runtime.StreamImagesResponse {
		return &runtime.StreamImagesResponse{Images: b}
	})
}

// sendBatches sends items in order, in responses that wrap makes of
// consecutive runs of them (see batchEnd). An empty list sends no response
// at all: the CRI asks for batches of at least one item, and the kubelet's
// client reads an empty stream as an empty list. A client that goes away
// mid-stream ends it with Canceled (or DeadlineExceeded) before the next
// batch is made.
func sendBatches[T proto.Message, R any](stream grpc.ServerStreamingServer[R], what string, items []T, wrap func([]T) *R) error {
	ctx := stream.Context()
	for start := 0; start < len(items); {
		if err := ctx.Err(); err != nil {
			return toStatus(fmt.Errorf("stream %s: after %d of %d: %w", what, start, len(items), err))
		}
		end := batchEnd(items, start, func(item T) int { return proto.Size(item) })
		// A slice of items, capped so that nobody appending to a batch
		// writes into the list.
		if err := stream.Send(wrap(items[start:end:end])); err != nil {
			return toStatus(fmt.Errorf("stream %s: send after %d of %d: %w", what, start, len(items), err))
		}
		start = end
	}
	return nil
}

// batchEnd is where the batch starting at items[start] ends: after
// streamBatchItems items, or before the item that would take its encoding
// past streamBatchBytes. A batch has at least one item.
func batchEnd[T any](items []T, start int, size func(T) int) int {
	end, total := start+1, size(items[start])
	for end < len(items) && end-start < streamBatchItems {
		total += size(items[end]) + 8 // the field's tag and length
		if total > streamBatchBytes {
			break
		}
		end++
	}
	return end
}
