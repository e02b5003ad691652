package server

import (
	"context"
	"slices"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/lifecycle"
)

// A sandbox or container whose create call has not answered is in no list,
// whatever the filter, and is listed from the moment it is made: the
// kubelet's relist took a sandbox being made for one that had died.
func TestListsLeaveOutWhatIsBeingCreated(t *testing.T) {
	s := newRecordsServer(t)
	ctx := context.Background()
	put := func(rec any) {
		t.Helper()
		var err error
		switch r := rec.(type) {
		case lifecycle.SandboxRecord:
			err = s.sandboxes.Put(r.ID, r)
		case lifecycle.ContainerRecord:
			err = s.containers.Put(r.ID, r)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	sandboxIDs := func(f *runtime.PodSandboxFilter) []string {
		t.Helper()
		resp, err := s.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, p := range resp.GetItems() {
			ids = append(ids, p.GetId())
		}
		return ids
	}
	containerIDs := func(f *runtime.ContainerFilter) []string {
		t.Helper()
		resp, err := s.ListContainers(ctx, &runtime.ListContainersRequest{Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range resp.GetContainers() {
			ids = append(ids, c.GetId())
		}
		return ids
	}

	ready, making := lifecycle.NewID(), lifecycle.NewID()
	put(lifecycle.SandboxRecord{ID: ready, State: lifecycle.StateReady})
	put(lifecycle.SandboxRecord{ID: making, State: lifecycle.StateCreating})
	made, creating := lifecycle.NewID(), lifecycle.NewID()
	put(lifecycle.ContainerRecord{ID: made, SandboxID: ready, State: lifecycle.StateCreated, Bundle: t.TempDir()})
	put(lifecycle.ContainerRecord{ID: creating, SandboxID: ready, State: lifecycle.StateCreating, Bundle: t.TempDir()})

	notReady := &runtime.PodSandboxFilter{State: &runtime.PodSandboxStateValue{State: runtime.PodSandboxState_SANDBOX_NOTREADY}}
	unknown := &runtime.ContainerFilter{State: &runtime.ContainerStateValue{State: runtime.ContainerState_CONTAINER_UNKNOWN}}
	for _, tc := range []struct {
		what string
		got  []string
		want []string
	}{
		{"sandboxes", sandboxIDs(nil), []string{ready}},
		{"not-ready sandboxes", sandboxIDs(notReady), nil},
		{"sandboxes by ID", sandboxIDs(&runtime.PodSandboxFilter{Id: making}), nil},
		{"containers", containerIDs(nil), []string{made}},
		{"containers in an unknown state", containerIDs(unknown), nil},
		{"containers by ID", containerIDs(&runtime.ContainerFilter{Id: creating}), nil},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%s: listed %v, want %v", tc.what, tc.got, tc.want)
		}
	}

	// Made: listed at once.
	if _, err := s.sandboxes.Update(making, func(r *lifecycle.SandboxRecord) error { r.State = lifecycle.StateReady; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.containers.Update(creating, func(r *lifecycle.ContainerRecord) error { r.State = lifecycle.StateCreated; return nil }); err != nil {
		t.Fatal(err)
	}
	if got := sandboxIDs(nil); !slices.Equal(got, sortedIDs(ready, making)) {
		t.Errorf("sandboxes once made: %v, want both", got)
	}
	if got := containerIDs(nil); !slices.Equal(got, sortedIDs(made, creating)) {
		t.Errorf("containers once made: %v, want both", got)
	}
}

func sortedIDs(ids ...string) []string {
	slices.Sort(ids)
	return ids
}
