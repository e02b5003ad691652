package server

import (
	"context"
	"encoding/json"

	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/lifecycle"
)

// verboseInfo is the info of a status answer, for the container's and the
// pod's alike: when the call is verbose (crictl inspect), the record minicri
// keeps and the config the kubelet sent, as JSON; else none.
func verboseInfo(verbose bool, rec, cfg any) map[string]string {
	if !verbose {
		return nil
	}
	info, _ := json.Marshal(struct {
		Record any `json:"record"`
		Config any `json:"config"`
	}{rec, cfg})
	return map[string]string{"info": string(info)}
}

// ContainerStatus reports a container's state, times, exit and config.
func (s *Server) ContainerStatus(ctx context.Context, req *runtime.ContainerStatusRequest) (*runtime.ContainerStatusResponse, error) {
	rec, err := s.lookupContainer(req.GetContainerId())
	if err != nil {
		return nil, toStatus(err)
	}
	cfg, err := rec.DecodeConfig()
	if err != nil {
		return nil, toStatus(err)
	}
	return &runtime.ContainerStatusResponse{
		Status: containerStatus(rec, cfg),
		Info:   verboseInfo(req.GetVerbose(), rec, cfg),
	}, nil
}

// containerStatus is a container's CRI status, from its record and config.
func containerStatus(rec lifecycle.ContainerRecord, cfg *runtime.ContainerConfig) *runtime.ContainerStatus {
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
		Mounts:      statusMounts(rec, cfg),
		LogPath:     rec.LogPath,
		Resources:   &runtime.ContainerResources{Linux: cfg.GetLinux().GetResources()},
		StopSignal:  statusStopSignal(rec, cfg),
		User:        criUser(rec.User),
	}
}

// statusMounts are the config's mounts; an image volume names the image it
// mounted: image is its repo digest (else its ID), and image_ref (KEP-5365,
// what the kubelet shows in the pod's volume mount status) is exactly what
// PullImage answered as image_ref, the image ID, as cri-tools checks.
func statusMounts(rec lifecycle.ContainerRecord, cfg *runtime.ContainerConfig) []*runtime.Mount {
	if len(rec.ImageVolumes) == 0 {
		return cfg.GetMounts()
	}
	mounts := make([]*runtime.Mount, len(cfg.GetMounts()))
	copy(mounts, cfg.GetMounts())
	for _, v := range rec.ImageVolumes {
		if v.Mount >= len(mounts) {
			continue
		}
		m := proto.Clone(mounts[v.Mount]).(*runtime.Mount)
		m.Image = &runtime.ImageSpec{Image: v.ImageRef, ImageRef: v.ImageID, Annotations: m.GetImage().GetAnnotations()}
		mounts[v.Mount] = m
	}
	return mounts
}

// statusStopSignal is the signal StopContainer sends as it was resolved at
// create (the config's, else the image's, else SIGTERM). A signal that the
// CRI's enum does not name (a number, a real-time signal) reports the
// config's, which is RUNTIME_DEFAULT then.
func statusStopSignal(rec lifecycle.ContainerRecord, cfg *runtime.ContainerConfig) runtime.Signal {
	if v, ok := runtime.Signal_value["SIGNAL_"+rec.StopSignal]; ok {
		return runtime.Signal(v)
	}
	return cfg.GetStopSignal()
}

func containerState(rec lifecycle.ContainerRecord) runtime.ContainerState {
	switch rec.State {
	case lifecycle.StateCreated:
		return runtime.ContainerState_CONTAINER_CREATED
	case lifecycle.StateRunning:
		return runtime.ContainerState_CONTAINER_RUNNING
	case lifecycle.StateExited:
		return runtime.ContainerState_CONTAINER_EXITED
	}
	return runtime.ContainerState_CONTAINER_UNKNOWN
}
