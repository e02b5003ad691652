package server

import (
	"context"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/validate"
)

// ListContainers lists containers, filtered by ID (or prefix), state,
// sandbox and labels, from the in-memory records.
func (s *Server) ListContainers(ctx context.Context, req *runtime.ListContainersRequest) (*runtime.ListContainersResponse, error) {
	items, err := list(req.GetFilter(), validateContainerFilter, s.containers.Range, containerListed, containerItem)
	if err != nil {
		return nil, err
	}
	return &runtime.ListContainersResponse{Containers: items}, nil
}

// containerListed is ListContainers' filter: containerMatches and the state.
// A container is listed only once CreateContainer has made it (see
// lifecycle.Made).
func containerListed(f *runtime.ContainerFilter, rec lifecycle.ContainerRecord) bool {
	return lifecycle.Made(rec.State) && containerMatches(f, rec) && (f.GetState() == nil || f.GetState().GetState() == containerState(rec))
}

// containerItem is a container's entry in ListContainers.
func containerItem(rec lifecycle.ContainerRecord) *runtime.Container {
	return &runtime.Container{
		Id:           rec.ID,
		PodSandboxId: rec.SandboxID,
		Metadata:     &runtime.ContainerMetadata{Name: rec.Metadata.Name, Attempt: rec.Metadata.Attempt},
		Image:        &runtime.ImageSpec{Image: rec.Image},
		ImageRef:     rec.ImageRef,
		ImageId:      rec.ImageID,
		State:        containerState(rec),
		CreatedAt:    rec.CreatedAt,
		Labels:       rec.Labels,
		Annotations:  rec.Annotations,
	}
}

func validateContainerFilter(f *runtime.ContainerFilter) error {
	// An ID filter is not checked: one that is no ID prefix (a UUID, a
	// name) matches nothing, as in containerd, and is only compared in memory.
	if st := f.GetState(); st != nil {
		if _, ok := runtime.ContainerState_name[int32(st.GetState())]; !ok {
			return validate.Invalidf("filter.state.state", "unknown container state %d", st.GetState())
		}
	}
	return validate.Map("filter.label_selector", f.GetLabelSelector())
}

// containerFilter is what the container list and container stats filters
// share.
type containerFilter interface {
	listFilter
	GetPodSandboxId() string
}

// containerStatsListed is ListContainerStats' filter: containerMatches, and
// running.
func containerStatsListed(f *runtime.ContainerStatsFilter, rec lifecycle.ContainerRecord) bool {
	return rec.State == lifecycle.StateRunning && containerMatches(f, rec)
}

// containerMatches reports whether rec passes f's ID and pod ID prefixes
// and its label selector.
func containerMatches(f containerFilter, rec lifecycle.ContainerRecord) bool {
	return strings.HasPrefix(rec.ID, f.GetId()) && strings.HasPrefix(rec.SandboxID, f.GetPodSandboxId()) &&
		labelsMatch(rec.Labels, f.GetLabelSelector())
}
