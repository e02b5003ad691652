package server

import (
	"context"
	"errors"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/validate"
)

// ListPodSandbox lists sandboxes, filtered by ID (or ID prefix), state and
// labels. It reads only the in-memory records: the kubelet calls it every
// second.
func (s *Server) ListPodSandbox(ctx context.Context, req *runtime.ListPodSandboxRequest) (*runtime.ListPodSandboxResponse, error) {
	items, err := list(req.GetFilter(), validateSandboxFilter, s.sandboxes.Range, sandboxListed, sandboxItem)
	if err != nil {
		return nil, err
	}
	return &runtime.ListPodSandboxResponse{Items: items}, nil
}

// sandboxListed is ListPodSandbox's filter: sandboxMatches and the state.
// A sandbox is listed only once RunPodSandbox has made it (see
// lifecycle.Made).
func sandboxListed(f *runtime.PodSandboxFilter, rec lifecycle.SandboxRecord) bool {
	return lifecycle.Made(rec.State) && sandboxMatches(f, rec) && (f.GetState() == nil || f.GetState().GetState() == sandboxState(rec))
}

// sandboxStatsListed is ListPodSandboxStats' filter: sandboxMatches, and
// ready.
func sandboxStatsListed(f *runtime.PodSandboxStatsFilter, rec lifecycle.SandboxRecord) bool {
	return rec.State == lifecycle.StateReady && sandboxMatches(f, rec)
}

// sandboxItem is a sandbox's entry in ListPodSandbox.
func sandboxItem(rec lifecycle.SandboxRecord) *runtime.PodSandbox {
	m := rec.Metadata
	return &runtime.PodSandbox{
		Id:             rec.ID,
		Metadata:       &runtime.PodSandboxMetadata{Name: m.Name, Namespace: m.Namespace, Uid: m.UID, Attempt: m.Attempt},
		State:          sandboxState(rec),
		CreatedAt:      rec.CreatedAt,
		Labels:         rec.Labels,
		Annotations:    rec.Annotations,
		RuntimeHandler: rec.Handler,
	}
}

// list checks a list call's filter, then makes the CRI entries of the
// records that pass it, in the records' order (by ID), walking them with
// their table's Range.
func list[F, R, T any](f F, validate func(F) error, records func(func(R) bool), keep func(F, R) bool, item func(R) T) ([]T, error) {
	if err := validate(f); err != nil {
		return nil, toStatus(err)
	}
	var out []T
	records(func(rec R) bool {
		if keep(f, rec) {
			out = append(out, item(rec))
		}
		return true
	})
	return out, nil
}

// statsList reads the stats of the records that keep accepts, in the
// records' order. A record whose cgroup is gone (oci.ErrNotFound) stopped
// since the records were taken, and is left out.
func statsList[F, R, S any](f F, records []R, keep func(F, R) bool, read func(R) (S, error)) ([]S, error) {
	var out []S
	for _, rec := range records {
		if !keep(f, rec) {
			continue
		}
		st, err := read(rec)
		if errors.Is(err, oci.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// statsOf reads the stats of the record id names: the single form of a
// stats list, which answers for a record in any state.
func statsOf[R, S any](id string, lookup func(string) (R, error), read func(R) (S, error)) (S, error) {
	rec, err := lookup(id)
	if err != nil {
		var none S
		return none, err
	}
	return read(rec)
}

// listFilter is what every CRI list filter has. An empty ID (a prefix of
// every ID) and an empty selector match everything.
type listFilter interface {
	GetId() string
	GetLabelSelector() map[string]string
}

// sandboxMatches reports whether rec passes f's ID prefix and label selector.
func sandboxMatches(f listFilter, rec lifecycle.SandboxRecord) bool {
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
			return validate.Invalidf("filter.state.state", "unknown sandbox state %d", st.GetState())
		}
	}
	return validate.Map("filter.label_selector", f.GetLabelSelector())
}
