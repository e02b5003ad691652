package server

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/internal/testreq"
	"github.com/minicri/minicri/store"
)

// newRecordsServer is a Server with record tables of its own in a temp dir
// and nothing else: enough for the handlers' lookups, which must answer
// before anything below them is reached.
func newRecordsServer(t *testing.T) *Server {
	t.Helper()
	dir := t.TempDir()
	sandboxes, _, err := store.Open[lifecycle.SandboxRecord](filepath.Join(dir, "sandboxes"), newSandbox)
	if err != nil {
		t.Fatal(err)
	}
	containers, _, err := store.Open[lifecycle.ContainerRecord](filepath.Join(dir, "containers"), newContainer)
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	return &Server{
		log:            logrus.NewEntry(log),
		sandboxes:      sandboxes,
		containers:     containers,
		sandboxNames:   store.NewNames(),
		containerNames: store.NewNames(),
		runtimes:       ociHandlers{&oci.Handlers{}}, // none configured: Status says so
	}
}

// unknownIDs are IDs no record has, of the kinds clients send.
var unknownIDs = []string{
	"6ba7b810-9dad-11d1-80b4-00c04fd430c8", // a UUID, as CI tools send
	"my-pod",
	"../../etc",
	strings.Repeat("a", 64),    // an ID of the right form
	strings.Repeat("n", 1<<16), // longer than any ID
}

func TestStopAndRemoveOfAnUnknownIDSucceed(t *testing.T) {
	s := newRecordsServer(t)
	ctx := context.Background()
	for _, id := range unknownIDs {
		for name, call := range map[string]func() error{
			"StopPodSandbox": func() error {
				_, err := s.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: id})
				return err
			},
			"RemovePodSandbox": func() error {
				_, err := s.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: id})
				return err
			},
			"StopContainer": func() error {
				_, err := s.StopContainer(ctx, &runtime.StopContainerRequest{ContainerId: id, Timeout: 1})
				return err
			},
			"RemoveContainer": func() error {
				_, err := s.RemoveContainer(ctx, &runtime.RemoveContainerRequest{ContainerId: id})
				return err
			},
		} {
			if err := call(); err != nil {
				t.Errorf("%s(%.40q) = %v, want success", name, id, err)
			}
		}
	}
}

func TestCallsOnAnUnknownIDAreNotFound(t *testing.T) {
	s := newRecordsServer(t)
	ctx := context.Background()
	for _, id := range unknownIDs {
		for name, call := range map[string]func() error{
			"PodSandboxStatus": func() error {
				_, err := s.PodSandboxStatus(ctx, &runtime.PodSandboxStatusRequest{PodSandboxId: id})
				return err
			},
			"PodSandboxStats": func() error {
				_, err := s.PodSandboxStats(ctx, &runtime.PodSandboxStatsRequest{PodSandboxId: id})
				return err
			},
			"PortForward": func() error {
				_, err := s.PortForward(ctx, &runtime.PortForwardRequest{PodSandboxId: id, Port: []int32{80}})
				return err
			},
			"CreateContainer": func() error {
				_, err := s.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: id, Config: testreq.Container(), SandboxConfig: testreq.Sandbox()})
				return err
			},
			"ContainerStatus": func() error {
				_, err := s.ContainerStatus(ctx, &runtime.ContainerStatusRequest{ContainerId: id})
				return err
			},
			"ContainerStats": func() error {
				_, err := s.ContainerStats(ctx, &runtime.ContainerStatsRequest{ContainerId: id})
				return err
			},
			"StartContainer": func() error {
				_, err := s.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: id})
				return err
			},
			"UpdateContainerResources": func() error {
				_, err := s.UpdateContainerResources(ctx, &runtime.UpdateContainerResourcesRequest{ContainerId: id})
				return err
			},
			"ReopenContainerLog": func() error {
				_, err := s.ReopenContainerLog(ctx, &runtime.ReopenContainerLogRequest{ContainerId: id})
				return err
			},
			"ExecSync": func() error {
				_, err := s.ExecSync(ctx, &runtime.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}})
				return err
			},
			"Exec": func() error {
				_, err := s.Exec(ctx, &runtime.ExecRequest{ContainerId: id, Cmd: []string{"true"}, Stdout: true})
				return err
			},
			"Attach": func() error {
				_, err := s.Attach(ctx, &runtime.AttachRequest{ContainerId: id, Stdout: true})
				return err
			},
		} {
			err := call()
			if status.Code(err) != codes.NotFound {
				t.Errorf("%s(%.40q) = %.200v, want NotFound", name, id, err)
			}
			if len(status.Convert(err).Message()) > 300 {
				t.Errorf("%s(%.40q): a message of %d bytes echoes the whole ID", name, id, len(status.Convert(err).Message()))
			}
		}
	}
}

func TestAnEmptyIDIsInvalidArgument(t *testing.T) {
	s := newRecordsServer(t)
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"StopPodSandbox": func() error {
			_, err := s.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{})
			return err
		},
		"RemoveContainer": func() error {
			_, err := s.RemoveContainer(ctx, &runtime.RemoveContainerRequest{})
			return err
		},
		"ContainerStatus": func() error {
			_, err := s.ContainerStatus(ctx, &runtime.ContainerStatusRequest{})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s with no ID = %v, want InvalidArgument", name, err)
		}
	}
}

func TestListFilterOfAnUnknownIDMatchesNothing(t *testing.T) {
	s := newRecordsServer(t)
	id := strings.Repeat("ab", 32)
	if err := s.sandboxes.Put(id, lifecycle.SandboxRecord{ID: id, State: lifecycle.StateReady}); err != nil {
		t.Fatal(err)
	}
	if err := s.containers.Put(id, lifecycle.ContainerRecord{ID: id, SandboxID: id, State: lifecycle.StateCreated}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, filter := range []string{"6ba7b810-9dad-11d1-80b4-00c04fd430c8", "../ab", "ab ab"} {
		pods, err := s.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{Filter: &runtime.PodSandboxFilter{Id: filter}})
		if err != nil || len(pods.GetItems()) != 0 {
			t.Errorf("ListPodSandbox(id %q) = %d pods, %v; want none and no error", filter, len(pods.GetItems()), err)
		}
		ctrs, err := s.ListContainers(ctx, &runtime.ListContainersRequest{Filter: &runtime.ContainerFilter{Id: filter}})
		if err != nil || len(ctrs.GetContainers()) != 0 {
			t.Errorf("ListContainers(id %q) = %d containers, %v; want none and no error", filter, len(ctrs.GetContainers()), err)
		}
		ctrs, err = s.ListContainers(ctx, &runtime.ListContainersRequest{Filter: &runtime.ContainerFilter{PodSandboxId: filter}})
		if err != nil || len(ctrs.GetContainers()) != 0 {
			t.Errorf("ListContainers(pod %q) = %d containers, %v; want none and no error", filter, len(ctrs.GetContainers()), err)
		}
	}
	// The record itself is still found by its prefix.
	pods, err := s.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{Filter: &runtime.PodSandboxFilter{Id: "abab"}})
	if err != nil || len(pods.GetItems()) != 1 {
		t.Fatalf("ListPodSandbox(id abab) = %d pods, %v; want the one", len(pods.GetItems()), err)
	}
}
