package server

import (
	"fmt"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/internal/broadcast"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// eventBuffer is how many events one GetContainerEvents subscriber may lag
// behind before it is dropped: the kubelet's own channel holds 1000.
const eventBuffer = 1024

// GetContainerEvents streams the lifecycle of containers and sandboxes
// (created, started, stopped, deleted) to the kubelet's evented PLEG. As
// containerd does, a sandbox's events carry its own ID as container_id.
// A subscriber that does not keep up is dropped with ResourceExhausted, never
// waited for: a CRI call must not block on a slow reader. The kubelet
// reconnects and relists.
func (s *Server) GetContainerEvents(req *runtime.GetEventsRequest, stream runtime.RuntimeService_GetContainerEventsServer) error {
	sub := s.events.Subscribe(stream.Context(), eventBuffer)
	defer sub.Close()
	for ev := range sub.C() {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	if err := sub.Err(); err != nil {
		return toStatus(fmt.Errorf("container events: %w", err))
	}
	return toStatus(markf(broadcast.ErrClosed, "container events subscription closed by the server"))
}

// EndEventStreams ends every GetContainerEvents stream: a graceful stop of
// the gRPC server waits for streams, and these never end by themselves.
func (s *Server) EndEventStreams() { s.events.Close() }

// containerEvent sends an event about a container (or, with the sandbox's
// ID as containerID, about a sandbox) with the status of its sandbox and of
// the pod's containers as they are now, as PodSandboxStatus reports them.
// Nothing is built when nobody listens.
func (s *Server) containerEvent(containerID, sandboxID string, typ runtime.ContainerEventType) {
	if !s.events.Active() {
		return
	}
	sb, err := s.sandboxes.Get(sandboxID)
	if err != nil {
		s.log.WithField("pod", sandboxID).WithError(err).Debug("container event without the sandbox's status")
		s.sendEvent(containerID, typ, nil, s.podContainerStatuses(lifecycle.SandboxRecord{ID: sandboxID}))
		return
	}
	s.sendEvent(containerID, typ, s.eventSandboxStatus(sb), s.podContainerStatuses(sb))
}

// sandboxRemovedEvents sends the events of a removed sandbox, from its last
// record, so that they still say which pod it was (the kubelet ignores an
// event without the sandbox's status): STOPPED first when it was removed
// without a stop, then DELETED.
func (s *Server) sandboxRemovedEvents(last lifecycle.SandboxRecord, wasReady bool) {
	if !s.events.Active() {
		return
	}
	last.State = lifecycle.StateNotReady
	st := s.eventSandboxStatus(last)
	if wasReady {
		s.sendEvent(last.ID, runtime.ContainerEventType_CONTAINER_STOPPED_EVENT, st, s.podContainerStatuses(last))
	}
	s.sendEvent(last.ID, runtime.ContainerEventType_CONTAINER_DELETED_EVENT, st, s.podContainerStatuses(last))
}

func (s *Server) sendEvent(containerID string, typ runtime.ContainerEventType, sb *runtime.PodSandboxStatus, containers []*runtime.ContainerStatus) {
	s.events.Send(&runtime.ContainerEventResponse{
		ContainerId:        containerID,
		ContainerEventType: typ,
		CreatedAt:          time.Now().UnixNano(),
		PodSandboxStatus:   sb,
		ContainersStatuses: containers,
	})
}

// eventSandboxStatus is a sandbox's status for an event; nil when its
// config cannot be read.
func (s *Server) eventSandboxStatus(sb lifecycle.SandboxRecord) *runtime.PodSandboxStatus {
	cfg, err := sb.DecodeConfig()
	if err != nil {
		return nil
	}
	return sandboxStatus(sb, cfg)
}
