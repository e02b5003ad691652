package server

import (
	"context"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListPodSandbox lists sandboxes, filtered by ID (or ID prefix), state and
// labels. It reads only the in-memory records: the kubelet calls it every
// second.
func (s *Server) ListPodSandbox(ctx context.Context, req *runtime.ListPodSandboxRequest) (*runtime.ListPodSandboxResponse, error) {
	f := req.GetFilter()
	if err := validateSandboxFilter(f); err != nil {
		return nil, toStatus(err)
	}
	var items []*runtime.PodSandbox
	for _, rec := range s.sandboxes.List() {
		if !sandboxMatches(f, rec) {
			continue
		}
		state := sandboxState(rec)
		if f.GetState() != nil && f.GetState().GetState() != state {
			continue
		}
		m := rec.Metadata
		items = append(items, &runtime.PodSandbox{
			Id:             rec.ID,
			Metadata:       &runtime.PodSandboxMetadata{Name: m.Name, Namespace: m.Namespace, Uid: m.UID, Attempt: m.Attempt},
			State:          state,
			CreatedAt:      rec.CreatedAt,
			Labels:         rec.Labels,
			Annotations:    rec.Annotations,
			RuntimeHandler: rec.Handler,
		})
	}
	return &runtime.ListPodSandboxResponse{Items: items}, nil
}

// listFilter is what every CRI list filter has. An empty ID (a prefix of
// every ID) and an empty selector match everything.
type listFilter interface {
	GetId() string
	GetLabelSelector() map[string]string
}

// sandboxMatches reports whether rec passes f's ID prefix and label selector.
func sandboxMatches(f listFilter, rec sandboxRecord) bool {
	return strings.HasPrefix(rec.ID, f.GetId()) && labelsMatch(rec.Labels, f.GetLabelSelector())
}

// labelsMatch reports whether labels has every key and value of selector.
func labelsMatch(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func validateSandboxFilter(f *runtime.PodSandboxFilter) error {
	// An ID filter that is no ID prefix matches nothing; see validateContainerFilter.
	if st := f.GetState(); st != nil {
		if _, ok := runtime.PodSandboxState_name[int32(st.GetState())]; !ok {
			return invalidf("filter.state.state", "unknown sandbox state %d", st.GetState())
		}
	}
	return validateMap("filter.label_selector", f.GetLabelSelector())
}
