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
	if err := s.reopenLog(ctx, req.GetContainerId()); err != nil {
		return nil, toStatus(err)
	}
	return &runtime.ReopenContainerLogResponse{}, nil
}

// reopenLog asks the monitor of a running container for a new log file.
func (s *Server) reopenLog(ctx context.Context, id string) error {
	rec, err := s.runningContainer(id)
	if err != nil {
		return fmt.Errorf("reopen log: %w", err)
	}
	if err := s.sockets.ReopenLog(ctx, rec.Bundle); err != nil {
		return fmt.Errorf("container %s: %w", rec.ID, err) // the monitor's error says "reopen log"
	}
	return nil
}
