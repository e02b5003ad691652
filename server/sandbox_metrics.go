package server

import (
	"context"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/stats"
)

// ListPodSandboxMetrics reports, for every ready pod, the metrics that
// ListMetricDescriptors names: the pod's cgroup and network figures, and
// each running container's. They come from the same reading as
// PodSandboxStats. A pod whose figures cannot be read is left out with a
// log line: one pod must not empty the kubelet's whole scrape.
func (s *Server) ListPodSandboxMetrics(ctx context.Context, req *runtime.ListPodSandboxMetricsRequest) (*runtime.ListPodSandboxMetricsResponse, error) {
	var out []*runtime.PodSandboxMetrics
	seen := map[string]bool{}
	for _, rec := range s.sandboxes.List() {
		if rec.State != lifecycle.StateReady {
			continue
		}
		sample, err := s.sandboxSample(rec)
		if err != nil {
			s.log.WithError(err).WithField("pod", rec.ID).Warn("no metrics for the pod")
			continue
		}
		for i := range sample.Containers {
			stats.ReadMetricsOnly(&sample.Containers[i], oci.CgroupDriver(s.cfg.CgroupDriver), s.log)
			seen[sample.Containers[i].Rec.ID] = true
		}
		out = append(out, stats.PodMetrics(rec, sample))
	}
	stats.KeepFactsOf(seen)
	return &runtime.ListPodSandboxMetricsResponse{PodMetrics: out}, nil
}
