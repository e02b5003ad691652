package server

import (
	"context"
	"encoding/json"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStatus reports a container's state, times, exit and config.
func (s *Server) ContainerStatus(ctx context.Context, req *runtime.ContainerStatusRequest) (*runtime.ContainerStatusResponse, error) {
	rec, err := s.lookupContainer(req.GetContainerId())
	if err != nil {
		return nil, toStatus(err)
	}
	cfg, err := rec.config()
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &runtime.ContainerStatusResponse{Status: containerStatus(rec, cfg)}
	if req.GetVerbose() {
		info, _ := json.Marshal(struct {
			Record containerRecord          `json:"record"`
			Config *runtime.ContainerConfig `json:"config"`
		}{rec, cfg})
		resp.Info = map[string]string{"info": string(info)}
	}
	return resp, nil
}

// containerStatus is a container's CRI status, from its record and config.
func containerStatus(rec containerRecord, cfg *runtime.ContainerConfig) *runtime.ContainerStatus {
	return &runtime.ContainerStatus{
		Id:          rec.ID,
		Metadata:    cfg.GetMetadata(),
		State:       containerState(rec),
		CreatedAt:   rec.CreatedAt,
		StartedAt:   rec.StartedAt,
		FinishedAt:  rec.FinishedAt,
		ExitCode:    rec.ExitCode,
		Image:       &runtime.ImageSpec{Image: rec.Image, Annotations: cfg.GetImage().GetAnnotations()},
		ImageRef:    rec.ImageRef,
		ImageId:     rec.ImageID,
		Reason:      rec.Reason,
		Message:     rec.Message,
		Labels:      rec.Labels,
		Annotations: rec.Annotations,
		Mounts:      cfg.GetMounts(),
		LogPath:     rec.LogPath,
		Resources:   &runtime.ContainerResources{Linux: cfg.GetLinux().GetResources()},
		StopSignal:  cfg.GetStopSignal(),
	}
}

func containerState(rec containerRecord) runtime.ContainerState {
	switch rec.State {
	case stateCreated:
		return runtime.ContainerState_CONTAINER_CREATED
	case stateRunning:
		return runtime.ContainerState_CONTAINER_RUNNING
	case stateExited:
		return runtime.ContainerState_CONTAINER_EXITED
	}
	return runtime.ContainerState_CONTAINER_UNKNOWN
}
