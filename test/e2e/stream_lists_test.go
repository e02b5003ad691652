//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
)

// The Stream list RPCs (KEP-5825) against their List twins, as the kubelet
// sees them: its own CRI client with streaming on (the CRIListStreaming
// gate) must see exactly what the same client with streaming off sees. The
// client falls back to List on Unimplemented, so each test also reads the
// stream itself and counts its batches: a daemon without the Stream RPCs
// fails there.

const (
	streamPods       = 50
	streamPerPod     = 4 // 200 containers; the last of each pod only created
	streamBatchLimit = 100
)

// streamNode is a daemon with 50 pods of 4 containers each: c0 to c2
// running, c3 created; the even pods and their containers labelled
// tier=even, the odd ones tier=odd; pod 0 stopped, so that every state is
// listed. The pods are removed when the test ends.
type streamNode struct {
	d        *Daemon
	ref      string
	pods     []string // by index
	ctrs     []string // pod i's containers at 4i..4i+3
	on       internalapi.RuntimeService
	imagesOn internalapi.ImageManagerService
	raw      runtime.RuntimeServiceClient
	rawImg   runtime.ImageServiceClient
}

func newStreamNode(t *testing.T, opts ...DaemonOption) *streamNode {
	t.Helper()
	d := StartDaemon(t, append([]DaemonOption{WithArgs("--log-level", "info")}, opts...)...)
	n := &streamNode{d: d, ref: busyboxRef(t)}
	d.pull(t, n.ref)
	t.Cleanup(func() { d.removeAll(t) })
	n.pods = make([]string, streamPods)
	n.ctrs = make([]string, streamPods*streamPerPod)
	jobs := make(chan int, streamPods)
	for i := range streamPods {
		jobs <- i
	}
	close(jobs)
	errs := make(chan error, streamPods)
	var workers sync.WaitGroup
	for range 4 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := range jobs {
				if err := n.makePod(i); err != nil {
					errs <- fmt.Errorf("pod %d: %w", i, err)
				}
			}
		}()
	}
	workers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Runtime.StopPodSandbox(ctx, n.pods[0]); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	n.on, n.imagesOn = streamingClients(t, d.Endpoint)
	conn, err := grpc.NewClient(d.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	n.raw, n.rawImg = runtime.NewRuntimeServiceClient(conn), runtime.NewImageServiceClient(conn)
	return n
}

func (n *streamNode) makePod(i int) error {
	tier := []string{"even", "odd"}[i%2]
	cfg := n.d.podConfig(fmt.Sprintf("stream-%d", i))
	cfg.Labels = map[string]string{"tier": tier}
	cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE}}
	var pod string
	if err := step(func(ctx context.Context) (err error) {
		pod, err = n.d.Runtime.RunPodSandbox(ctx, cfg, "")
		return err
	}); err != nil {
		return fmt.Errorf("RunPodSandbox: %w", err)
	}
	n.pods[i] = pod
	for c := range streamPerPod {
		ctr := containerConfig(fmt.Sprintf("c%d", c), n.ref, "sleep", "3600")
		ctr.Labels = map[string]string{"tier": tier}
		var id string
		if err := step(func(ctx context.Context) (err error) {
			id, err = n.d.Runtime.CreateContainer(ctx, pod, ctr, cfg)
			return err
		}); err != nil {
			return fmt.Errorf("CreateContainer c%d: %w", c, err)
		}
		n.ctrs[i*streamPerPod+c] = id
		if c == streamPerPod-1 {
			break
		}
		if err := step(func(ctx context.Context) error { return n.d.Runtime.StartContainer(ctx, id) }); err != nil {
			return fmt.Errorf("StartContainer c%d: %w", c, err)
		}
	}
	return nil
}

// streamingClients are the kubelet's CRI clients of endpoint with
// streaming on, as the CRIListStreaming gate builds them.
func streamingClients(t testing.TB, endpoint string) (internalapi.RuntimeService, internalapi.ImageManagerService) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rt, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(10 * time.Second).
		WithTracerProvider(nil).WithUseStreaming(true).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.NewRemoteImageServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(10 * time.Second).
		WithTracerProvider(nil).WithUseStreaming(true).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rt, img
}

// recvBatches reads a stream to its end and returns its batch sizes; it
// fails the test on any error, Unimplemented included, and on a batch that
// is empty or larger than the daemon's bound.
func recvBatches[R any](t *testing.T, what string, recv func() (*R, error), items func(*R) int) []int {
	t.Helper()
	var sizes []int
	for range 1000 {
		r, err := recv()
		if errors.Is(err, io.EOF) {
			return sizes
		}
		if err != nil {
			t.Fatalf("%s: after %d batches: %v", what, len(sizes), err)
		}
		if n := items(r); n == 0 || n > streamBatchLimit {
			t.Errorf("%s: a batch of %d items; want 1 to %d", what, n, streamBatchLimit)
		}
		sizes = append(sizes, items(r))
	}
	t.Fatalf("%s: no end after 1000 batches", what)
	return nil
}

func sum(v []int) int {
	s := 0
	for _, x := range v {
		s += x
	}
	return s
}

// sortedIDs are the IDs of items, sorted.
func sortedIDs[T any](items []T, id func(T) string) []string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = id(it)
	}
	slices.Sort(ids)
	return ids
}

// whole is a message's every field, as text: lists that do not change
// between two calls are compared whole.
func whole[T proto.Message](m T) string { return prototext.Format(m) }

func TestStreamContainersAndSandboxesAsTheirListTwins(t *testing.T) {
	n := newStreamNode(t)
	ctx := context.Background()
	off := n.d.Runtime
	running := &runtime.ContainerStateValue{State: runtime.ContainerState_CONTAINER_RUNNING}

	containerFilters := []struct {
		name string
		f    *runtime.ContainerFilter
		want int
	}{
		{"none", nil, 200},
		{"by id", &runtime.ContainerFilter{Id: n.ctrs[9]}, 1},
		{"running", &runtime.ContainerFilter{State: running}, 147},
		{"created", &runtime.ContainerFilter{State: &runtime.ContainerStateValue{State: runtime.ContainerState_CONTAINER_CREATED}}, 49},
		{"exited", &runtime.ContainerFilter{State: &runtime.ContainerStateValue{State: runtime.ContainerState_CONTAINER_EXITED}}, 4},
		{"by pod", &runtime.ContainerFilter{PodSandboxId: n.pods[7]}, 4},
		{"label selector", &runtime.ContainerFilter{LabelSelector: map[string]string{"tier": "odd"}}, 100},
		{"label, running", &runtime.ContainerFilter{LabelSelector: map[string]string{"tier": "even"}, State: running}, 72},
	}
	for _, tc := range containerFilters {
		stream, err := n.raw.StreamContainers(ctx, &runtime.StreamContainersRequest{Filter: tc.f})
		if err != nil {
			t.Fatal(err)
		}
		batches := recvBatches(t, "StreamContainers "+tc.name, stream.Recv, func(r *runtime.StreamContainersResponse) int { return len(r.GetContainers()) })
		listed, errOff := off.ListContainers(ctx, tc.f)
		streamed, errOn := n.on.ListContainers(ctx, tc.f)
		compareTwins(t, "containers, "+tc.name, tc.want, batches, listed, streamed, errOff, errOn, (*runtime.Container).GetId, whole)
	}

	sandboxFilters := []struct {
		name string
		f    *runtime.PodSandboxFilter
		want int
	}{
		{"none", nil, 50},
		{"by id", &runtime.PodSandboxFilter{Id: n.pods[3]}, 1},
		{"ready", &runtime.PodSandboxFilter{State: &runtime.PodSandboxStateValue{State: runtime.PodSandboxState_SANDBOX_READY}}, 49},
		{"not ready", &runtime.PodSandboxFilter{State: &runtime.PodSandboxStateValue{State: runtime.PodSandboxState_SANDBOX_NOTREADY}}, 1},
		{"label selector", &runtime.PodSandboxFilter{LabelSelector: map[string]string{"tier": "even"}}, 25},
	}
	for _, tc := range sandboxFilters {
		stream, err := n.raw.StreamPodSandboxes(ctx, &runtime.StreamPodSandboxesRequest{Filter: tc.f})
		if err != nil {
			t.Fatal(err)
		}
		batches := recvBatches(t, "StreamPodSandboxes "+tc.name, stream.Recv, func(r *runtime.StreamPodSandboxesResponse) int { return len(r.GetPodSandboxes()) })
		listed, errOff := off.ListPodSandbox(ctx, tc.f)
		streamed, errOn := n.on.ListPodSandbox(ctx, tc.f)
		compareTwins(t, "sandboxes, "+tc.name, tc.want, batches, listed, streamed, errOff, errOn, (*runtime.PodSandbox).GetId, whole)
	}

	for _, ref := range []string{"", n.ref, "no-such-image:latest"} {
		filter := &runtime.ImageFilter{Image: &runtime.ImageSpec{Image: ref}}
		stream, err := n.rawImg.StreamImages(ctx, &runtime.StreamImagesRequest{Filter: filter})
		if err != nil {
			t.Fatal(err)
		}
		batches := recvBatches(t, "StreamImages "+ref, stream.Recv, func(r *runtime.StreamImagesResponse) int { return len(r.GetImages()) })
		listed, errOff := n.d.Images.ListImages(ctx, filter)
		streamed, errOn := n.imagesOn.ListImages(ctx, filter)
		compareTwins(t, fmt.Sprintf("images %q", ref), len(listed), batches, listed, streamed, errOff, errOn, (*runtime.Image).GetId, whole)
	}

	// An empty answer is an empty stream, and a refused filter is refused
	// alike, not Unimplemented (on which the kubelet would fall back).
	stream, err := n.raw.StreamContainers(ctx, &runtime.StreamContainersRequest{Filter: &runtime.ContainerFilter{Id: "no-such-container"}})
	if err != nil {
		t.Fatal(err)
	}
	if b := recvBatches(t, "StreamContainers of nothing", stream.Recv, func(r *runtime.StreamContainersResponse) int { return len(r.GetContainers()) }); len(b) != 0 {
		t.Errorf("a list of nothing streamed as batches %v; want none", b)
	}
	bad := &runtime.ContainerFilter{State: &runtime.ContainerStateValue{State: 42}}
	_, errOff := off.ListContainers(ctx, bad)
	_, errOn := n.on.ListContainers(ctx, bad)
	if errOff == nil || errOn == nil || errOn.Error() != errOff.Error() {
		t.Errorf("an unknown state: list %v, streaming %v; want the same refusal", errOff, errOn)
	}
}

// Stats change between two calls: they are compared on who they are about
// and on which figures they carry.
func TestStreamStatsAndMetricsAsTheirListTwins(t *testing.T) {
	n := newStreamNode(t)
	ctx := context.Background()
	off := n.d.Runtime

	ctrShape := func(s *runtime.ContainerStats) string {
		return fmt.Sprintf("%v cpu=%t mem=%t wl=%t", s.GetAttributes(), s.GetCpu() != nil, s.GetMemory() != nil, s.GetWritableLayer() != nil)
	}
	containerFilters := []struct {
		name string
		f    *runtime.ContainerStatsFilter
		want int
	}{
		{"none", nil, 147}, // the running ones
		{"by id", &runtime.ContainerStatsFilter{Id: n.ctrs[9]}, 1},
		{"by pod", &runtime.ContainerStatsFilter{PodSandboxId: n.pods[7]}, 3},
		{"label selector", &runtime.ContainerStatsFilter{LabelSelector: map[string]string{"tier": "odd"}}, 75},
	}
	for _, tc := range containerFilters {
		stream, err := n.raw.StreamContainerStats(ctx, &runtime.StreamContainerStatsRequest{Filter: tc.f})
		if err != nil {
			t.Fatal(err)
		}
		batches := recvBatches(t, "StreamContainerStats "+tc.name, stream.Recv, func(r *runtime.StreamContainerStatsResponse) int { return len(r.GetContainerStats()) })
		listed, errOff := off.ListContainerStats(ctx, tc.f)
		streamed, errOn := n.on.ListContainerStats(ctx, tc.f)
		compareTwins(t, "container stats, "+tc.name, tc.want, batches, listed, streamed, errOff, errOn, func(s *runtime.ContainerStats) string { return s.GetAttributes().GetId() }, ctrShape)
	}

	podShape := func(s *runtime.PodSandboxStats) string {
		l := s.GetLinux()
		return fmt.Sprintf("%v cpu=%t mem=%t proc=%t net=%t containers=%v", s.GetAttributes(), l.GetCpu() != nil, l.GetMemory() != nil,
			l.GetProcess() != nil, l.GetNetwork() != nil, sortedIDs(l.GetContainers(), func(c *runtime.ContainerStats) string { return c.GetAttributes().GetId() }))
	}
	podFilters := []struct {
		name string
		f    *runtime.PodSandboxStatsFilter
		want int
	}{
		{"none", nil, 49}, // the ready ones
		{"by id", &runtime.PodSandboxStatsFilter{Id: n.pods[3]}, 1},
		{"label selector", &runtime.PodSandboxStatsFilter{LabelSelector: map[string]string{"tier": "even"}}, 24},
	}
	for _, tc := range podFilters {
		stream, err := n.raw.StreamPodSandboxStats(ctx, &runtime.StreamPodSandboxStatsRequest{Filter: tc.f})
		if err != nil {
			t.Fatal(err)
		}
		batches := recvBatches(t, "StreamPodSandboxStats "+tc.name, stream.Recv, func(r *runtime.StreamPodSandboxStatsResponse) int { return len(r.GetPodSandboxStats()) })
		listed, errOff := off.ListPodSandboxStats(ctx, tc.f)
		streamed, errOn := n.on.ListPodSandboxStats(ctx, tc.f)
		compareTwins(t, "pod stats, "+tc.name, tc.want, batches, listed, streamed, errOff, errOn, func(s *runtime.PodSandboxStats) string { return s.GetAttributes().GetId() }, podShape)
	}

	metricsShape := func(m *runtime.PodSandboxMetrics) string {
		names := func(ms []*runtime.Metric) []string {
			return sortedIDs(ms, func(m *runtime.Metric) string { return m.GetName() + fmt.Sprint(m.GetLabelValues()) })
		}
		var ctrs []string
		for _, c := range m.GetContainerMetrics() {
			ctrs = append(ctrs, fmt.Sprint(c.GetContainerId(), names(c.GetMetrics())))
		}
		slices.Sort(ctrs)
		return fmt.Sprint(names(m.GetMetrics()), ctrs)
	}
	stream, err := n.raw.StreamPodSandboxMetrics(ctx, &runtime.StreamPodSandboxMetricsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	batches := recvBatches(t, "StreamPodSandboxMetrics", stream.Recv, func(r *runtime.StreamPodSandboxMetricsResponse) int { return len(r.GetPodSandboxMetrics()) })
	listed, errOff := off.ListPodSandboxMetrics(ctx)
	streamed, errOn := n.on.ListPodSandboxMetrics(ctx)
	compareTwins(t, "pod metrics", 49, batches, listed, streamed, errOff, errOn, (*runtime.PodSandboxMetrics).GetPodSandboxId, metricsShape)
}

// compareTwins checks a Stream call against its List twin: the stream
// read itself gave want items in batches, and the kubelet's client gave
// the same items, compared by ID and then on shape, with streaming off
// (listed) and on (streamed).
func compareTwins[T any](t *testing.T, what string, want int, batches []int, off, on []T, errOff, errOn error, id, shape func(T) string) {
	t.Helper()
	if errOff != nil || errOn != nil {
		t.Fatalf("%s: list %v, streaming %v", what, errOff, errOn)
	}
	if len(off) != want || sum(batches) != want {
		t.Errorf("%s: listed %d, streamed %d in batches %v; want %d", what, len(off), sum(batches), batches, want)
	}
	if !slices.Equal(sortedIDs(off, id), sortedIDs(on, id)) {
		t.Errorf("%s: streaming lists %d items, list %d: %v vs %v", what, len(on), len(off), sortedIDs(on, id), sortedIDs(off, id))
		return
	}
	shapes := map[string]string{}
	for _, it := range off {
		shapes[id(it)] = shape(it)
	}
	for _, it := range on {
		if got, want := shape(it), shapes[id(it)]; got != want {
			t.Errorf("%s: %s streamed as\n  %s\nlisted as\n  %s", what, id(it), got, want)
		}
	}
}

// A kubelet with the CRIListStreaming gate runs a pod and reports its
// stats with the Stream calls alone: minicri answers every one (none
// Unimplemented, on which the kubelet would go back to List for good), and
// the kubelet makes no List call of the six.
func TestKubeletWithCRIListStreaming(t *testing.T) {
	kubeletBinary(t)
	addr := freeLoopbackAddr(t)
	d := StartDaemon(t, WithArgs("--metrics-address", addr))
	d.bridgeNetwork(t)
	n := &kubeletNode{d: d, ref: busyboxRef(t)}
	n.k = startKubelet(t, d, "--feature-gates=CRIListStreaming=true")
	k := n.k
	k.writeManifest(t, staticPod("streamed", n.container("a", sleepForever), n.container("b", sleepForever)))
	k.waitPod(t, "streamed", "Running with every container running", 90*time.Second, running)

	// /stats/summary (StreamPodSandboxStats) has both
	// containers' figures, and /metrics/cadvisor (StreamPodSandboxMetrics)
	// names them.
	waitFor(t, "both containers' CPU in /stats/summary", 30*time.Second, func() bool {
		code, body := k.get(t, "/stats/summary")
		var sum statsSummary
		if code != http.StatusOK || json.Unmarshal([]byte(body), &sum) != nil {
			return false
		}
		for _, p := range sum.Pods {
			if p.PodRef.Name != k.podName("streamed") {
				continue
			}
			seen := 0
			for _, c := range p.Containers {
				if positive(c.CPU != nil, func() *uint64 { return c.CPU.UsageCoreNanoSeconds }) {
					seen++
				}
			}
			return seen == 2
		}
		return false
	})
	waitFor(t, "the pod's containers in /metrics/cadvisor", 30*time.Second, func() bool {
		code, body := k.get(t, "/metrics/cadvisor")
		return code == http.StatusOK && strings.Contains(body, `container="a"`) && strings.Contains(body, `container="b"`)
	})

	scrape := httpGet(t, "http://"+addr+"/metrics")
	twins := map[string]string{
		"StreamPodSandboxes": "ListPodSandbox", "StreamContainers": "ListContainers",
		"StreamPodSandboxStats": "ListPodSandboxStats", "StreamContainerStats": "ListContainerStats",
		"StreamPodSandboxMetrics": "ListPodSandboxMetrics", "StreamImages": "ListImages",
	}
	calls := func(method, code string) float64 {
		return metricValue(t, scrape, fmt.Sprintf(`minicri_cri_request_duration_seconds_count{code=%q,method=%q}`, code, method))
	}
	for stream, list := range twins {
		if got := calls(stream, "Unimplemented"); got != 0 {
			t.Errorf("%s answered Unimplemented %v times", stream, got)
		}
		if got := calls(list, "OK"); got != 0 {
			t.Errorf("the kubelet called %s %v times; with the gate it streams", list, got)
		}
	}
	// StreamImages comes only with the image GC's first pass, minutes after
	// the start, and StreamContainerStats not at all: the kubelet reads the
	// containers' stats from their pods'. Neither is waited for.
	for _, stream := range []string{"StreamPodSandboxes", "StreamContainers", "StreamPodSandboxStats", "StreamPodSandboxMetrics"} {
		if calls(stream, "OK") == 0 {
			t.Errorf("the kubelet never called %s", stream)
		}
	}
}
