package server

import (
	"context"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RuntimeConfig tells the kubelet which cgroup driver to use, so that the two
// agree without the operator setting it twice.
func (s *Server) RuntimeConfig(ctx context.Context, req *runtime.RuntimeConfigRequest) (*runtime.RuntimeConfigResponse, error) {
	driver := runtime.CgroupDriver_CGROUPFS
	if s.cfg.CgroupDriver == "systemd" {
		driver = runtime.CgroupDriver_SYSTEMD
	}
	return &runtime.RuntimeConfigResponse{
		Linux: &runtime.LinuxRuntimeConfiguration{CgroupDriver: driver},
	}, nil
}
