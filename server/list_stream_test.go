package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/minicri/minicri/image"
)

// batchStream is a server stream that keeps what is sent to it; cancel,
// when set, is called after the first send, as a client that goes away.
type batchStream[R any] struct {
	grpc.ServerStream
	ctx    context.Context
	cancel context.CancelFunc
	sent   []*R
}

func (b *batchStream[R]) Context() context.Context { return b.ctx }

func (b *batchStream[R]) Send(r *R) error {
	b.sent = append(b.sent, r)
	if b.cancel != nil {
		b.cancel()
	}
	return b.ctx.Err()
}

// images makes n images whose IDs are idBytes long.
func images(n, idBytes int) []*runtime.Image {
	out := make([]*runtime.Image, n)
	for i := range out {
		id := fmt.Sprint(i)
		out[i] = &runtime.Image{Id: strings.Repeat("0", max(idBytes-len(id), 0)) + id}
	}
	return out
}

// sendBatches cuts a list into batches of at most streamBatchItems items and
// streamBatchBytes bytes, in order, each item once; an empty list is an
// empty stream, as the CRI's "batches of at least one item" asks.
func TestSendBatches(t *testing.T) {
	big := streamBatchBytes * 2 / 5 // two fit in a batch, three do not
	tests := []struct {
		name      string
		items     []*runtime.Image
		wantSizes []int
	}{
		{"empty", nil, nil},
		{"one", images(1, 8), []int{1}},
		{"a full batch", images(streamBatchItems, 8), []int{streamBatchItems}},
		{"one more than a batch", images(streamBatchItems+1, 8), []int{streamBatchItems, 1}},
		{"200 and a half batch", images(250, 8), []int{streamBatchItems, streamBatchItems, 50}},
		{"bounded by bytes", images(5, big), []int{2, 2, 1}},
		{"an item past the bound goes alone", images(2, streamBatchBytes+1), []int{1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stream := &batchStream[runtime.StreamImagesResponse]{ctx: context.Background()}
			err := sendBatches(stream, "images", tc.items, func(b []*runtime.Image) *runtime.StreamImagesResponse {
				return &runtime.StreamImagesResponse{Images: b}
			})
			if err != nil {
				t.Fatalf("sendBatches: %v", err)
			}
			var sizes []int
			var got []*runtime.Image
			for _, r := range stream.sent {
				sizes = append(sizes, len(r.GetImages()))
				if n := proto.Size(r); len(r.GetImages()) > 1 && n > streamBatchBytes {
					t.Errorf("a batch of %d items is %d bytes, more than %d", len(r.GetImages()), n, streamBatchBytes)
				}
				got = append(got, r.GetImages()...)
			}
			if !slices.Equal(sizes, tc.wantSizes) {
				t.Errorf("batch sizes %v, want %v", sizes, tc.wantSizes)
			}
			if !slices.Equal(got, tc.items) {
				t.Errorf("the batches carry %d items, not the %d listed in order", len(got), len(tc.items))
			}
		})
	}
}

// A batch is a slice of the list, capped: appending to one (as a client
// library may) cannot write into the next batch or into a kept answer.
func TestSendBatchesDoNotShareRoomWithTheList(t *testing.T) {
	items := images(streamBatchItems+1, 8)
	stream := &batchStream[runtime.StreamImagesResponse]{ctx: context.Background()}
	if err := sendBatches(stream, "images", items, func(b []*runtime.Image) *runtime.StreamImagesResponse {
		return &runtime.StreamImagesResponse{Images: b}
	}); err != nil {
		t.Fatal(err)
	}
	_ = append(stream.sent[0].Images, &runtime.Image{Id: "appended"})
	if items[streamBatchItems].GetId() == "appended" {
		t.Fatal("appending to the first batch overwrote the list's next item")
	}
}

// A client that goes away mid-stream ends it with Canceled, and no batch is
// made after that.
func TestSendBatchesStopsWhenTheClientCancels(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := &batchStream[runtime.StreamImagesResponse]{ctx: ctx, cancel: cancel}
	err := sendBatches(stream, "images", images(3*streamBatchItems, 8), func(b []*runtime.Image) *runtime.StreamImagesResponse {
		return &runtime.StreamImagesResponse{Images: b}
	})
	wantCode(t, "a stream whose client canceled", err, codes.Canceled, "images")
	if len(stream.sent) != 1 {
		t.Errorf("%d batches sent; want 1, the one before the client went away", len(stream.sent))
	}
}

// streamClients serves s on a unix socket as the daemon does and returns
// the kubelet's CRI clients of it with streaming on and off, and the number
// of responses each streaming RPC sent.
type streamClients struct {
	on, off           internalapi.RuntimeService
	imagesOn, imgsOff internalapi.ImageManagerService
	raw               runtime.RuntimeServiceClient

	mu      sync.Mutex
	batches map[string]int // by method name
}

func (c *streamClients) sent(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.batches[method]
}

type countingStream struct {
	grpc.ServerStream
	count func()
}

func (s countingStream) SendMsg(m any) error {
	s.count()
	return s.ServerStream.SendMsg(m)
}

func serveStreaming(t testing.TB, s *Server) *streamClients {
	t.Helper()
	c := &streamClients{batches: map[string]int{}}
	count := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, countingStream{ss, func() {
			c.mu.Lock()
			c.batches[methodName(info.FullMethod)]++
			c.mu.Unlock()
		}})
	}
	sock := filepath.Join(t.TempDir(), "cri.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.MaxRecvMsgSize(16<<20), grpc.MaxSendMsgSize(16<<20), grpc.StreamInterceptor(count))
	s.Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	endpoint := "unix://" + sock
	for _, streaming := range []bool{true, false} {
		rt, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).
			WithConnectionTimeout(10 * time.Second).WithTracerProvider(nil).WithUseStreaming(streaming).Build(ctx)
		if err != nil {
			t.Fatal(err)
		}
		img, err := remote.NewRemoteImageServiceBuilder().WithEndpoint(endpoint).
			WithConnectionTimeout(10 * time.Second).WithTracerProvider(nil).WithUseStreaming(streaming).Build(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if streaming {
			c.on, c.imagesOn = rt, img
		} else {
			c.off, c.imgsOff = rt, img
		}
	}
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c.raw = runtime.NewRuntimeServiceClient(conn)
	return c
}

// streamTestNode makes 100 pods of two containers each (200 containers),
// the even pods labelled tier=even, the first container of each started.
func streamTestNode(t *testing.T) (ts *testServer, podIDs, ctrIDs []string) {
	t.Helper()
	ts = newTestServer(t)
	for i := range 100 {
		pod := podConfig(fmt.Sprintf("web-%d", i))
		pod.Labels = map[string]string{"tier": []string{"even", "odd"}[i%2]}
		podID := ts.runPod(t, pod)
		podIDs = append(podIDs, podID)
		for j := range 2 {
			cfg := kubeletLikeConfig(pod, fmt.Sprintf("c%d", j))
			cfg.Labels["tier"] = pod.Labels["tier"]
			id := ts.createCtr(t, podID, pod, cfg)
			ctrIDs = append(ctrIDs, id)
			if j == 0 {
				if _, err := ts.StartContainer(bg, &runtime.StartContainerRequest{ContainerId: id}); err != nil {
					t.Fatalf("StartContainer: %v", err)
				}
			}
		}
	}
	return ts, podIDs, ctrIDs
}

// sameByID says how want and got differ as sets of messages by ID, or ""
// when they hold the same messages.
func sameByID[T interface {
	proto.Message
	GetId() string
}](want, got []T) string {
	sorted := func(l []T) []T {
		return slices.SortedFunc(slices.Values(l), func(a, b T) int { return strings.Compare(a.GetId(), b.GetId()) })
	}
	want, got = sorted(want), sorted(got)
	if len(want) != len(got) {
		return fmt.Sprintf("%d items, want %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(want[i], got[i]) {
			return fmt.Sprintf("item %d is %v, want %v", i, got[i], want[i])
		}
	}
	return ""
}

// The kubelet's client sees with streaming on exactly what it sees with it
// off, for every filter, and the answer did come from the Stream RPC, in
// batches of at most streamBatchItems: a runtime without them would pass
// the comparison by the client's fallback alone.
func TestStreamListsAnswerAsTheirListTwins(t *testing.T) {
	ts, podIDs, ctrIDs := streamTestNode(t)
	ts.images.Add("docker.io/library/alpine:latest", image.Config{Cmd: []string{"sh"}})
	c := serveStreaming(t, ts.Server)
	ctx := context.Background()

	containerFilters := map[string]*runtime.ContainerFilter{
		"none":           nil,
		"empty":          {},
		"by id":          {Id: ctrIDs[7]},
		"by id prefix":   {Id: ctrIDs[7][:12]},
		"unknown id":     {Id: "no-such-container"},
		"running":        {State: &runtime.ContainerStateValue{State: runtime.ContainerState_CONTAINER_RUNNING}},
		"created":        {State: &runtime.ContainerStateValue{State: runtime.ContainerState_CONTAINER_CREATED}},
		"by pod":         {PodSandboxId: podIDs[3]},
		"label selector": {LabelSelector: map[string]string{"tier": "even"}},
		"label and state": {LabelSelector: map[string]string{"tier": "odd"},
			State: &runtime.ContainerStateValue{State: runtime.ContainerState_CONTAINER_RUNNING}},
	}
	for name, f := range containerFilters {
		before := c.sent("StreamContainers")
		on, errOn := c.on.ListContainers(ctx, f)
		off, errOff := c.off.ListContainers(ctx, f)
		if errOn != nil || errOff != nil {
			t.Fatalf("containers, filter %s: streaming %v, list %v", name, errOn, errOff)
		}
		if diff := sameByID(off, on); diff != "" {
			t.Errorf("containers, filter %s: streaming differs: %s", name, diff)
		}
		wantBatches := (len(off) + streamBatchItems - 1) / streamBatchItems
		if got := c.sent("StreamContainers") - before; got != wantBatches {
			t.Errorf("containers, filter %s: %d items in %d batches; want %d", name, len(off), got, wantBatches)
		}
	}
	if all, _ := c.off.ListContainers(ctx, nil); len(all) != 200 {
		t.Fatalf("%d containers listed; want 200", len(all))
	}

	sandboxFilters := map[string]*runtime.PodSandboxFilter{
		"none":           nil,
		"by id":          {Id: podIDs[5]},
		"ready":          {State: &runtime.PodSandboxStateValue{State: runtime.PodSandboxState_SANDBOX_READY}},
		"not ready":      {State: &runtime.PodSandboxStateValue{State: runtime.PodSandboxState_SANDBOX_NOTREADY}},
		"label selector": {LabelSelector: map[string]string{"tier": "odd"}},
	}
	for name, f := range sandboxFilters {
		before := c.sent("StreamPodSandboxes")
		on, errOn := c.on.ListPodSandbox(ctx, f)
		off, errOff := c.off.ListPodSandbox(ctx, f)
		if errOn != nil || errOff != nil {
			t.Fatalf("sandboxes, filter %s: streaming %v, list %v", name, errOn, errOff)
		}
		if diff := sameByID(off, on); diff != "" {
			t.Errorf("sandboxes, filter %s: streaming differs: %s", name, diff)
		}
		if c.sent("StreamPodSandboxes") == before && len(off) > 0 {
			t.Errorf("sandboxes, filter %s: answered without StreamPodSandboxes", name)
		}
	}

	before := c.sent("StreamImages")
	on, errOn := c.imagesOn.ListImages(ctx, nil)
	off, errOff := c.imgsOff.ListImages(ctx, nil)
	if errOn != nil || errOff != nil || len(off) != 2 {
		t.Fatalf("images: streaming %v, list %d images, %v", errOn, len(off), errOff)
	}
	if diff := sameByID(off, on); diff != "" {
		t.Errorf("images: streaming differs: %s", diff)
	}
	if c.sent("StreamImages") != before+1 {
		t.Errorf("images answered in %d batches; want 1", c.sent("StreamImages")-before)
	}
}

// A filter the List twin refuses is refused by the Stream RPC with the same
// code, which the kubelet's client passes on (it falls back only on
// Unimplemented).
func TestStreamListsRefuseWhatTheListRefuses(t *testing.T) {
	ts := newTestServer(t)
	c := serveStreaming(t, ts.Server)
	ctx := context.Background()
	badState := &runtime.ContainerFilter{State: &runtime.ContainerStateValue{State: 42}}
	_, errOn := c.on.ListContainers(ctx, badState)
	_, errOff := c.off.ListContainers(ctx, badState)
	wantCode(t, "StreamContainers of an unknown state", errOn, codes.InvalidArgument, "filter.state.state")
	if status.Code(errOn) != status.Code(errOff) {
		t.Errorf("streaming %v, list %v; want the same code", errOn, errOff)
	}
	_, err := c.on.ListPodSandbox(ctx, &runtime.PodSandboxFilter{State: &runtime.PodSandboxStateValue{State: 42}})
	wantCode(t, "StreamPodSandboxes of an unknown state", err, codes.InvalidArgument, "filter.state.state")
}

// Every Stream RPC is served, an empty list as an empty stream: none
// answers Unimplemented, which would send the kubelet back to List.
func TestStreamListsAreServed(t *testing.T) {
	ts := newTestServer(t)
	c := serveStreaming(t, ts.Server)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recvAll := func(name string, recv func() error) {
		for range 10 {
			if err := recv(); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Errorf("%s: %v; want an empty stream", name, err)
				}
				return
			}
		}
		t.Errorf("%s: a list of nothing sent batches", name)
	}
	streams := map[string]func() (func() error, error){
		"StreamContainers": func() (func() error, error) {
			s, err := c.raw.StreamContainers(ctx, &runtime.StreamContainersRequest{})
			return func() error { _, err := s.Recv(); return err }, err
		},
		"StreamPodSandboxes": func() (func() error, error) {
			s, err := c.raw.StreamPodSandboxes(ctx, &runtime.StreamPodSandboxesRequest{})
			return func() error { _, err := s.Recv(); return err }, err
		},
		"StreamContainerStats": func() (func() error, error) {
			s, err := c.raw.StreamContainerStats(ctx, &runtime.StreamContainerStatsRequest{})
			return func() error { _, err := s.Recv(); return err }, err
		},
		"StreamPodSandboxStats": func() (func() error, error) {
			s, err := c.raw.StreamPodSandboxStats(ctx, &runtime.StreamPodSandboxStatsRequest{})
			return func() error { _, err := s.Recv(); return err }, err
		},
		"StreamPodSandboxMetrics": func() (func() error, error) {
			s, err := c.raw.StreamPodSandboxMetrics(ctx, &runtime.StreamPodSandboxMetricsRequest{})
			return func() error { _, err := s.Recv(); return err }, err
		},
	}
	for name, open := range streams {
		recv, err := open()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		recvAll(name, recv)
	}
}

// BenchmarkStreamContainersKubeletClient is BenchmarkListContainersKubeletClient
// with the client's streaming on: 200 containers as the kubelet creates them.
func BenchmarkStreamContainersKubeletClient(b *testing.B) {
	for _, streaming := range []bool{false, true} {
		b.Run(fmt.Sprintf("streaming=%t", streaming), func(b *testing.B) {
			ts := newTestServer(b)
			for i := range 100 {
				pod := podConfig(fmt.Sprintf("web-%d", i))
				podID := ts.runPod(b, pod)
				for j := range 2 {
					ts.createCtr(b, podID, pod, kubeletLikeConfig(pod, fmt.Sprintf("c%d", j)))
				}
			}
			c := serveStreaming(b, ts.Server)
			client := c.off
			if streaming {
				client = c.on
			}
			for b.Loop() {
				got, err := client.ListContainers(bg, nil)
				if err != nil || len(got) != 200 {
					b.Fatalf("ListContainers: %d containers, %v", len(got), err)
				}
			}
		})
	}
}

// StreamContainers of every container sends what ListContainers answers,
// cut into batches.
func TestStreamContainersSendsWhatListContainersAnswers(t *testing.T) {
	ts := newTestServer(t)
	pod := podConfig("web")
	podID := ts.runPod(t, pod)
	for i := range streamBatchItems + 1 {
		ts.createCtr(t, podID, pod, ctrConfig(fmt.Sprintf("c%d", i)))
	}
	kept, err := ts.ListContainers(bg, &runtime.ListContainersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	stream := &batchStream[runtime.StreamContainersResponse]{ctx: context.Background()}
	if err := ts.StreamContainers(&runtime.StreamContainersRequest{}, stream); err != nil {
		t.Fatal(err)
	}
	var sent []*runtime.Container
	for _, r := range stream.sent {
		sent = append(sent, r.GetContainers()...)
	}
	if diff := sameByID(kept.GetContainers(), sent); len(stream.sent) != 2 || diff != "" {
		t.Errorf("%d containers in %d batches, want ListContainers' %d entries in 2: %s", len(sent), len(stream.sent), len(kept.GetContainers()), diff)
	}
}
