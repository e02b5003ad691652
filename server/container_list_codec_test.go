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
	ts.encodedContainers.mu.Lock()
	_, kept := ts.encodedContainers.byID[ids[0]]
	ts.encodedContainers.mu.Unlock()
	if kept {
		t.Error("a removed container's encoding is still kept")
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
