package server

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCodecEncodesListContainersAsProtobuf: what the codec writes for a
// ListContainers answer decodes to the answer, after state changes and
// removals too, and every other message is grpc's own encoding.
func TestCodecEncodesListContainersAsProtobuf(t *testing.T) {
	ts := newTestServer(t)
	codec := ts.Codec()
	if codec.Name() != grpcproto.Name {
		t.Fatalf("codec name %q, want %q: clients would see another content type", codec.Name(), grpcproto.Name)
	}
	roundTrip := func(what string) {
		t.Helper()
		want, err := ts.ListContainers(bg, &runtime.ListContainersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		data, err := codec.Marshal(want)
		if err != nil {
			t.Fatalf("%s: Marshal: %v", what, err)
		}
		got := &runtime.ListContainersResponse{}
		if err := proto.Unmarshal(data.Materialize(), got); err != nil {
			t.Fatalf("%s: the codec's bytes do not decode: %v", what, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("%s: decoded\n%v\nwant\n%v", what, got, want)
		}
	}
	roundTrip("no containers")
	var ids []string
	// Enough for an answer over grpc's pooling threshold (1 KiB).
	for i := range 20 {
		pod := podConfig(fmt.Sprintf("web-%d", i))
		podID := ts.runPod(t, pod)
		ids = append(ids, ts.createCtr(t, podID, pod, kubeletLikeConfig(pod, "app")))
	}
	roundTrip("created")
	roundTrip("created, encodings kept")
	if _, err := ts.StartContainer(bg, &runtime.StartContainerRequest{ContainerId: ids[1]}); err != nil {
		t.Fatal(err)
	}
	roundTrip("one started")
	if _, err := ts.RemoveContainer(bg, &runtime.RemoveContainerRequest{ContainerId: ids[0]}); err != nil {
		t.Fatal(err)
	}
	roundTrip("one removed")
	if ts.keptObject(ids[0]) {
		t.Error("a removed container's object, and its encoding, is still kept")
	}

	other := &runtime.VersionResponse{Version: "0.1.0", RuntimeName: "minicri"}
	data, err := codec.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := encoding.GetCodecV2(grpcproto.Name).Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	if string(data.Materialize()) != string(plain.Materialize()) {
		t.Error("another message is not encoded as grpc's codec does")
	}
}

// An unfiltered ListContainers answer is made once per version of the
// containers table: asked again it is the same answer with the same
// encoding, and any change of a record makes a new one that shows it.
func TestListContainersAnswerIsKeptUntilARecordChanges(t *testing.T) {
	ts := newTestServer(t)
	codec := ts.Codec()
	var ids []string
	for i := range 12 { // over grpc's pooling threshold
		pod := podConfig(fmt.Sprintf("web-%d", i))
		ids = append(ids, ts.createCtr(t, ts.runPod(t, pod), pod, kubeletLikeConfig(pod, "app")))
	}
	listAll := func(filter *runtime.ContainerFilter) *runtime.ListContainersResponse {
		t.Helper()
		resp, err := ts.ListContainers(bg, &runtime.ListContainersRequest{Filter: filter})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// fresh is the answer made from the records, with nothing kept.
	fresh := func() *runtime.ListContainersResponse {
		var items []*runtime.Container
		for _, rec := range ts.containers.List() {
			items = append(items, containerItem(rec))
		}
		return &runtime.ListContainersResponse{Containers: items}
	}
	encodedAt := func(resp *runtime.ListContainersResponse) *byte {
		t.Helper()
		data, err := codec.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != 1 {
			t.Fatalf("the answer is in %d buffers, want 1", len(data))
		}
		return &data[0].ReadOnlyData()[0]
	}

	first := listAll(nil)
	if again := listAll(&runtime.ContainerFilter{}); again != first {
		t.Error("an unchanged table's second unfiltered list (an empty filter, as the kubelet sends) made a new answer")
	}
	if encodedAt(first) != encodedAt(first) {
		t.Error("the kept answer was encoded twice")
	}
	created := &runtime.ContainerFilter{State: &runtime.ContainerStateValue{State: runtime.ContainerState_CONTAINER_CREATED}}
	if filtered := listAll(created); filtered == first || len(filtered.GetContainers()) != len(ids) {
		t.Errorf("a filtered list gave the kept answer, or %d containers, want a new one with %d", len(filtered.GetContainers()), len(ids))
	}
	if listAll(nil) != first {
		t.Error("a filtered list replaced the kept unfiltered answer")
	}

	changes := []struct {
		what string
		do   func() error
	}{
		{"a start", func() error {
			_, err := ts.StartContainer(bg, &runtime.StartContainerRequest{ContainerId: ids[0]})
			return err
		}},
		{"a removal", func() error {
			_, err := ts.RemoveContainer(bg, &runtime.RemoveContainerRequest{ContainerId: ids[1]})
			return err
		}},
		{"a create", func() error {
			pod := podConfig("late")
			ts.createCtr(t, ts.runPod(t, pod), pod, ctrConfig("app"))
			return nil
		}},
	}
	last := first
	for _, c := range changes {
		if err := c.do(); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		got := listAll(nil)
		if got == last {
			t.Fatalf("after %s the kept answer was given", c.what)
		}
		if !proto.Equal(got, fresh()) {
			t.Fatalf("after %s the answer\n%v\nis not the records'\n%v", c.what, got, fresh())
		}
		decoded := &runtime.ListContainersResponse{}
		data, err := codec.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(data.Materialize(), decoded); err != nil || !proto.Equal(decoded, got) {
			t.Fatalf("after %s the encoding does not decode to the answer: %v", c.what, err)
		}
		last = got
	}
}

// TestListContainersKeepsNoRemovedContainer: a removal that lands between
// the making of a ListContainers answer and its encoding (grpc encodes
// after the handler returned), or between the handler's walk of the table
// and its keeping of the answer, leaves nothing of the removed container
// kept: neither its encoding nor an answer that lists it. Before, each such
// removal leaked one encoding for the life of the daemon.
func TestListContainersKeepsNoRemovedContainer(t *testing.T) {
	for _, tc := range []struct {
		name string
		// list lists every container, removing ids[0] at the point under test.
		list func(t *testing.T, ts *testServer, remove func()) *runtime.ListContainersResponse
	}{
		{"removed after the handler returned, before grpc encodes", func(t *testing.T, ts *testServer, remove func()) *runtime.ListContainersResponse {
			resp, err := ts.ListContainers(bg, &runtime.ListContainersRequest{})
			if err != nil {
				t.Fatal(err)
			}
			remove()
			return resp
		}},
		{"removed between the walk and the keeping of the answer", func(t *testing.T, ts *testServer, remove func()) *runtime.ListContainersResponse {
			ts.encodedContainers.beforeKeep = remove
			defer func() { ts.encodedContainers.beforeKeep = nil }()
			resp, err := ts.ListContainers(bg, &runtime.ListContainersRequest{})
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t)
			codec := ts.Codec()
			var ids []string
			for i := range 3 {
				pod := podConfig(fmt.Sprintf("web-%d", i))
				ids = append(ids, ts.createCtr(t, ts.runPod(t, pod), pod, kubeletLikeConfig(pod, "app")))
			}
			removed := false
			remove := func() {
				if _, err := ts.RemoveContainer(bg, &runtime.RemoveContainerRequest{ContainerId: ids[0]}); err != nil {
					t.Fatal(err)
				}
				removed = true
			}
			resp := tc.list(t, ts, remove)
			if !removed {
				t.Fatal("the removal did not run: the test misses the point it is about")
			}
			if len(resp.GetContainers()) != 3 {
				t.Fatalf("the answer made before the removal lists %d containers, want 3", len(resp.GetContainers()))
			}
			if _, err := codec.Marshal(resp); err != nil {
				t.Fatal(err)
			}
			ts.encodedContainers.mu.Lock()
			every := ts.encodedContainers.every
			ts.encodedContainers.mu.Unlock()
			if ts.keptObject(ids[0]) {
				t.Error("the removed container's object, and its encoding, is kept")
			}
			for _, c := range every.GetContainers() {
				if c.GetId() == ids[0] {
					t.Error("the kept answer listing every container holds the removed container")
				}
			}
			next, err := ts.ListContainers(bg, &runtime.ListContainersRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(next.GetContainers()) != 2 {
				t.Errorf("the list after the removal has %d containers, want 2", len(next.GetContainers()))
			}
		})
	}
}
