package server

import (
	"context"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/stats"
)

// ListMetricDescriptors lists the metrics ListPodSandboxMetrics reports. The
// kubelet (PodAndContainerStatsFromCRI) asks once, then serves the metrics
// on its /metrics/cadvisor endpoint in place of cAdvisor's: hence cAdvisor's
// names, help texts and label keys, so that dashboards and alerts written
// for cAdvisor keep working.
func (s *Server) ListMetricDescriptors(ctx context.Context, req *runtime.ListMetricDescriptorsRequest) (*runtime.ListMetricDescriptorsResponse, error) {
	return &runtime.ListMetricDescriptorsResponse{Descriptors: stats.Descriptors()}, nil
}
