package server

import (
	"context"
	"fmt"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ReopenContainerLog makes the container's monitor start a new log file at
// the log path, after the kubelet renamed the old one for rotation. Only a
// running container has a monitor writing its log: any other is refused
// with FailedPrecondition.
func (s *Server) ReopenContainerLog(ctx context.Context, req *runtime.ReopenContainerLogRequest) (*runtime.ReopenContainerLogResponse, error) {
	rec, err := s.runningContainer(req.GetContainerId())
	if err != nil {
		return nil, toStatus(fmt.Errorf("reopen log: %w", err))
	}
	if err := s.monitor.ReopenLog(ctx, rec.Bundle); err != nil {
		return nil, toStatus(fmt.Errorf("reopen log of container %s: %w", rec.ID, err))
	}
	return &runtime.ReopenContainerLogResponse{}, nil
}
