package server

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
)

// eventStream is a GetContainerEvents stream whose client reads from sent,
// or does not read at all when block is set.
type eventStream struct {
	grpc.ServerStream
	ctx   context.Context
	sent  chan *runtime.ContainerEventResponse
	block chan struct{}
}

func (e *eventStream) Context() context.Context { return e.ctx }

func (e *eventStream) Send(ev *runtime.ContainerEventResponse) error {
	if e.block != nil {
		select {
		case <-e.block:
		case <-e.ctx.Done():
			return e.ctx.Err()
		}
	}
	select {
	case e.sent <- ev:
		return nil
	case <-e.ctx.Done():
		return e.ctx.Err()
	}
}

// subscribe runs GetContainerEvents until the test ends; its error arrives on
// the returned channel.
func subscribe(t *testing.T, s *Server, stream *eventStream) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream.ctx = ctx
	if stream.sent == nil {
		stream.sent = make(chan *runtime.ContainerEventResponse, 100)
	}
	done := make(chan error, 1)
	go func() { done <- s.GetContainerEvents(&runtime.GetEventsRequest{}, stream) }()
	waitFor(t, "the subscription", s.events.Active)
	return done
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func nextEvent(t *testing.T, stream *eventStream) *runtime.ContainerEventResponse {
	t.Helper()
	select {
	case ev := <-stream.sent:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
		return nil
	}
}

// eventPod puts a ready sandbox and one running container in s's tables.
func eventPod(t *testing.T, s *Server) (sandboxID, containerID string) {
	t.Helper()
	sbCfg, _ := proto.Marshal(&runtime.PodSandboxConfig{Metadata: &runtime.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "uid-1"}})
	ctrCfg, _ := proto.Marshal(&runtime.ContainerConfig{Metadata: &runtime.ContainerMetadata{Name: "app"}})
	sandboxID, containerID = lifecycle.NewID(), lifecycle.NewID()
	if err := s.sandboxes.Put(sandboxID, lifecycle.SandboxRecord{ID: sandboxID, State: lifecycle.StateReady, Config: sbCfg}); err != nil {
		t.Fatal(err)
	}
	rec := lifecycle.ContainerRecord{ID: containerID, SandboxID: sandboxID, State: lifecycle.StateRunning, Config: ctrCfg, Bundle: t.TempDir()}
	if err := s.containers.Put(containerID, rec); err != nil {
		t.Fatal(err)
	}
	return sandboxID, containerID
}

func TestContainerEventCarriesPodAndContainerStatuses(t *testing.T) {
	s := newRecordsServer(t)
	sbID, ctrID := eventPod(t, s)
	stream := &eventStream{}
	subscribe(t, s, stream)

	s.containerEvent(ctrID, sbID, runtime.ContainerEventType_CONTAINER_STARTED_EVENT)
	ev := nextEvent(t, stream)
	if ev.GetContainerId() != ctrID || ev.GetContainerEventType() != runtime.ContainerEventType_CONTAINER_STARTED_EVENT {
		t.Fatalf("event = %s %v, want %s STARTED", ev.GetContainerId(), ev.GetContainerEventType(), ctrID)
	}
	if ev.GetCreatedAt() == 0 {
		t.Error("event has no created_at")
	}
	// The kubelet drops an event without the sandbox's metadata.
	if got := ev.GetPodSandboxStatus().GetMetadata().GetUid(); got != "uid-1" || ev.GetPodSandboxStatus().GetId() != sbID {
		t.Errorf("pod_sandbox_status = %v, want sandbox %s with uid uid-1", ev.GetPodSandboxStatus(), sbID)
	}
	if st := ev.GetContainersStatuses(); len(st) != 1 || st[0].GetId() != ctrID || st[0].GetState() != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("containers_statuses = %v, want the one running container", st)
	}
}

// A container that ends on its own (or whose monitor dies) is recorded by the
// exit watch, not by StopContainer: that must send STOPPED too.
func TestExitOnItsOwnSendsStopped(t *testing.T) {
	s := newRecordsServer(t)
	s.monitors = newMonitorPlacement(1)
	s.runtimes = ociHandlers{&oci.Handlers{}}
	sbID, ctrID := eventPod(t, s)
	stream := &eventStream{}
	subscribe(t, s, stream)

	s.recordExit(ctrID)
	ev := nextEvent(t, stream)
	if ev.GetContainerId() != ctrID || ev.GetContainerEventType() != runtime.ContainerEventType_CONTAINER_STOPPED_EVENT {
		t.Fatalf("event = %s %v, want %s STOPPED", ev.GetContainerId(), ev.GetContainerEventType(), ctrID)
	}
	if ev.GetPodSandboxStatus().GetId() != sbID {
		t.Errorf("event's sandbox = %q, want %s", ev.GetPodSandboxStatus().GetId(), sbID)
	}
	if st := ev.GetContainersStatuses(); len(st) != 1 || st[0].GetState() != runtime.ContainerState_CONTAINER_EXITED {
		t.Errorf("containers_statuses = %v, want the container exited", st)
	}
}

// An exit recorded while StartContainer has not recorded the start yet (a
// process that ends at once) must not be seen before STARTED.
func TestExitDuringStartComesAfterStarted(t *testing.T) {
	s := newRecordsServer(t)
	s.monitors = newMonitorPlacement(1)
	s.runtimes = ociHandlers{&oci.Handlers{}}
	_, ctrID := eventPod(t, s)
	rec, _ := s.containers.Get(ctrID)
	stream := &eventStream{}
	subscribe(t, s, stream)

	c := s.ctr(ctrID)
	if err := s.transition(bg, c, rec, starting); err != nil {
		t.Fatal(err)
	}
	s.recordExit(ctrID) // the watch, racing the start
	_ = s.transition(bg, c, rec, started)
	for _, want := range []runtime.ContainerEventType{runtime.ContainerEventType_CONTAINER_STARTED_EVENT, runtime.ContainerEventType_CONTAINER_STOPPED_EVENT} {
		if ev := nextEvent(t, stream); ev.GetContainerEventType() != want {
			t.Fatalf("event %v, want %v", ev.GetContainerEventType(), want)
		}
	}
}

func TestSlowEventSubscriberIsDroppedWithResourceExhausted(t *testing.T) {
	s := newRecordsServer(t)
	sbID, ctrID := eventPod(t, s)
	stream := &eventStream{block: make(chan struct{})}
	done := subscribe(t, s, stream)

	start := time.Now()
	for range eventBuffer + 2 { // one in the blocked Send, the buffer, one too many
		s.containerEvent(ctrID, sbID, runtime.ContainerEventType_CONTAINER_STARTED_EVENT)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("sending to a subscriber that does not read took %s", took)
	}
	close(stream.block)
	go func() {
		for range stream.sent {
		}
	}()
	select {
	case err := <-done:
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("GetContainerEvents = %v, want ResourceExhausted", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the slow subscriber's stream did not end")
	}
	if s.events.Active() {
		t.Error("the dropped subscriber is still subscribed")
	}
}

func TestEndEventStreamsEndsStreamsUnavailable(t *testing.T) {
	s := newRecordsServer(t)
	done := subscribe(t, s, &eventStream{})
	s.EndEventStreams()
	select {
	case err := <-done:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("GetContainerEvents = %v, want Unavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream still open after EndEventStreams")
	}
}

func TestEventStreamEndsWithItsContext(t *testing.T) {
	s := newRecordsServer(t)
	stream := &eventStream{}
	ctx, cancel := context.WithCancel(context.Background())
	stream.ctx = ctx
	stream.sent = make(chan *runtime.ContainerEventResponse, 1)
	done := make(chan error, 1)
	go func() { done <- s.GetContainerEvents(&runtime.GetEventsRequest{}, stream) }()
	waitFor(t, "the subscription", s.events.Active)
	cancel()
	select {
	case err := <-done:
		if status.Code(err) != codes.Canceled {
			t.Fatalf("GetContainerEvents = %v, want Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream still open after its context ended")
	}
	if s.events.Active() {
		t.Error("subscriber left after its stream ended")
	}
}

// PodSandboxStatus and events carry the statuses of every container of the
// pod, of its older sandboxes too and exited ones, newest first, each as
// ContainerStatus reports it. PodSandboxStatus sets no timestamp: with one, a
// kubelet with EventedPLEG on takes containers_statuses for the whole truth
// (it saw pods with no containers and created them again and again when
// they were missing) and leaves its active containers empty (it ran an init
// container again and again when they were there).
func TestPodSandboxStatusAndEventsCarryThePodsContainers(t *testing.T) {
	s := newRecordsServer(t)
	putSandbox := func(uid string, createdAt int64, state lifecycle.SandboxRecordState) string {
		t.Helper()
		cfg, _ := proto.Marshal(&runtime.PodSandboxConfig{Metadata: &runtime.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: uid}})
		id := lifecycle.NewID()
		rec := lifecycle.SandboxRecord{ID: id, Metadata: lifecycle.PodMetadata{Name: "web", Namespace: "ns", UID: uid}, State: state, CreatedAt: createdAt, Config: cfg}
		if err := s.sandboxes.Put(id, rec); err != nil {
			t.Fatal(err)
		}
		return id
	}
	putContainer := func(sandboxID, name string, attempt uint32, createdAt int64, state lifecycle.ContainerRecordState) string {
		t.Helper()
		md := &runtime.ContainerMetadata{Name: name, Attempt: attempt}
		labels := map[string]string{"io.kubernetes.container.name": name, "io.kubernetes.pod.uid": "uid-1"}
		annotations := map[string]string{"io.kubernetes.container.hash": "abc", "io.kubernetes.container.restartCount": "1"}
		cfg, _ := proto.Marshal(&runtime.ContainerConfig{Metadata: md, Labels: labels, Annotations: annotations})
		id := lifecycle.NewID()
		rec := lifecycle.ContainerRecord{ID: id, SandboxID: sandboxID, Metadata: lifecycle.ContainerMetadata{Name: name, Attempt: attempt},
			Labels: labels, Annotations: annotations, CreatedAt: createdAt, State: state, Config: cfg, Bundle: t.TempDir()}
		if err := s.containers.Put(id, rec); err != nil {
			t.Fatal(err)
		}
		return id
	}
	oldSandbox := putSandbox("uid-1", 1, lifecycle.StateNotReady)
	sandbox := putSandbox("uid-1", 10, lifecycle.StateReady)
	other := putSandbox("uid-2", 5, lifecycle.StateReady)
	oldest := putContainer(oldSandbox, "app", 0, 2, lifecycle.StateExited)
	exited := putContainer(sandbox, "app", 1, 11, lifecycle.StateExited)
	running := putContainer(sandbox, "app", 2, 12, lifecycle.StateRunning)
	putContainer(sandbox, "side", 0, 13, lifecycle.StateCreating)
	putContainer(other, "app", 0, 6, lifecycle.StateRunning)
	want := []string{running, exited, oldest}

	check := func(what string, got []*runtime.ContainerStatus) {
		t.Helper()
		var ids []string
		for _, st := range got {
			ids = append(ids, st.GetId())
		}
		if !slices.Equal(ids, want) {
			t.Fatalf("%s: containers_statuses = %v, want %v (running, exited, older sandbox's; newest first)", what, ids, want)
		}
		for _, st := range got {
			resp, err := s.ContainerStatus(context.Background(), &runtime.ContainerStatusRequest{ContainerId: st.GetId()})
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(st, resp.GetStatus()) {
				t.Errorf("%s: status of %s = %v, want what ContainerStatus says: %v", what, st.GetId(), st, resp.GetStatus())
			}
		}
	}

	resp, err := s.PodSandboxStatus(context.Background(), &runtime.PodSandboxStatusRequest{PodSandboxId: sandbox})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetTimestamp(); got != 0 {
		t.Errorf("PodSandboxStatus timestamp = %d, want none: the kubelet would then skip ContainerStatus", got)
	}
	check("PodSandboxStatus", resp.GetContainersStatuses())

	stream := &eventStream{}
	subscribe(t, s, stream)
	s.containerEvent(running, sandbox, runtime.ContainerEventType_CONTAINER_STARTED_EVENT)
	ev := nextEvent(t, stream)
	check("event", ev.GetContainersStatuses())
	if !proto.Equal(ev.GetPodSandboxStatus(), resp.GetStatus()) {
		t.Errorf("event's pod_sandbox_status = %v, want what PodSandboxStatus says: %v", ev.GetPodSandboxStatus(), resp.GetStatus())
	}
}
