package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ReopenContainerLog makes the container's monitor start a new log file at
// the log path, after the kubelet renamed the old one for rotation.
func (s *Server) ReopenContainerLog(ctx context.Context, req *runtime.ReopenContainerLogRequest) (*runtime.ReopenContainerLogResponse, error) {
	rec, err := s.lookupContainer(req.GetContainerId())
	if err != nil {
		return nil, toStatus(err)
	}
	if rec.State != stateRunning {
		return nil, status.Errorf(codes.FailedPrecondition, "container %s is %s: only a running container's log can be reopened", rec.ID, rec.State)
	}
	if err := s.monitor.ReopenLog(ctx, rec.Bundle); err != nil {
		return nil, toStatus(fmt.Errorf("reopen log of container %s: %w", rec.ID, err))
	}
	return &runtime.ReopenContainerLogResponse{}, nil
}
