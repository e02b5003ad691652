package server

import (
	"fmt"
	"sync"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Codec is the gRPC codec the daemon serves the CRI with: grpc's protobuf
// codec, except that a ListContainers answer is put together from each
// container's encoding, made once per container and state. The kubelet
// lists every container every second; at 200 containers encoding them anew
// was the largest part of the daemon's side of the call.
func (s *Server) Codec() encoding.CodecV2 {
	return listCodec{proto: encoding.GetCodecV2(grpcproto.Name), containers: &s.encodedContainers}
}

type listCodec struct {
	proto      encoding.CodecV2
	containers *encodedContainers
}

// Name is the protobuf codec's: clients see no other content type.
func (c listCodec) Name() string { return grpcproto.Name }

func (c listCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c listCodec) Marshal(v any) (mem.BufferSlice, error) {
	if batch, ok := v.(*runtime.StreamContainersResponse); ok {
		// A StreamContainers batch is, on the wire, a ListContainersResponse
		// of its containers (TestStreamContainersBatchIsAListOnTheWire).
		return c.containers.encode(&runtime.ListContainersResponse{Containers: batch.GetContainers()})
	}
	resp, ok := v.(*runtime.ListContainersResponse)
	if !ok {
		return c.proto.Marshal(v)
	}
	return c.containers.encode(resp)
}

// containersField is the number of ListContainersResponse's only field,
// its repeated containers.
var containersField = (&runtime.ListContainersResponse{}).ProtoReflect().Descriptor().Fields().ByName("containers").Number()

// encodedContainers keeps the encoding of each container's ListContainers
// entry. An entry is a record's ID, sandbox, metadata, image, creation time,
// labels and annotations, which never change for an ID, and its state, which
// is compared: a container in another state is encoded again.
//
// It also keeps the last answer listing every container, with the version
// of the containers table it was made from, and that answer's encoding
// once made: while the table does not change, that answer is sent again as
// it is, neither walked nor encoded.
type encodedContainers struct {
	mu   sync.Mutex
	byID map[string]encodedContainer

	every        *runtime.ListContainersResponse
	everyVersion uint64
	everyData    []byte // nil until encode made it; never changed after
}

type encodedContainer struct {
	state runtime.ContainerState
	data  []byte
}

// lastOfEvery returns the kept answer listing every container if it was
// made from this version of the containers table, else nil.
func (e *encodedContainers) lastOfEvery(version uint64) *runtime.ListContainersResponse {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.every != nil && e.everyVersion == version {
		return e.every
	}
	return nil
}

// keepEvery keeps resp, an answer listing every container made from this
// version of the table, unless one of a later version is kept already.
func (e *encodedContainers) keepEvery(version uint64, resp *runtime.ListContainersResponse) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.every == nil || version >= e.everyVersion {
		e.every, e.everyVersion, e.everyData = resp, version, nil
	}
}

// encode writes resp as proto.Marshal would, field for field (map entries
// aside, whose order protobuf leaves open). The kept answer listing every
// container is encoded once, into memory it keeps, and then sent from it;
// any other answer goes into a buffer of grpc's pool that grpc returns once
// it is sent.
func (e *encodedContainers) encode(resp *runtime.ListContainersResponse) (mem.BufferSlice, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	kept := resp == e.every
	if kept && e.everyData != nil {
		// Read only, by grpc and by every call sending it: SliceBuffer's
		// Free returns nothing to a pool.
		return mem.BufferSlice{mem.SliceBuffer(e.everyData)}, nil
	}
	entries := make([][]byte, len(resp.GetContainers()))
	size := 0
	for i, c := range resp.GetContainers() {
		data, err := e.encoding(c)
		if err != nil {
			return nil, err
		}
		entries[i] = data
		size += protowire.SizeTag(containersField) + protowire.SizeBytes(len(data))
	}
	appendEntries := func(b []byte) []byte {
		for _, data := range entries {
			b = protowire.AppendTag(b, containersField, protowire.BytesType)
			b = protowire.AppendBytes(b, data)
		}
		return b
	}
	if kept || mem.IsBelowBufferPoolingThreshold(size) {
		data := appendEntries(make([]byte, 0, size))
		if kept {
			e.everyData = data
		}
		return mem.BufferSlice{mem.SliceBuffer(data)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	*buf = appendEntries((*buf)[:0])
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// encoding returns c's kept encoding, or makes and keeps it. The caller
// holds mu.
func (e *encodedContainers) encoding(c *runtime.Container) ([]byte, error) {
	if kept, ok := e.byID[c.GetId()]; ok && kept.state == c.GetState() {
		return kept.data, nil
	}
	data, err := proto.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode container %s: %w", c.GetId(), err)
	}
	if e.byID == nil {
		e.byID = map[string]encodedContainer{}
	}
	e.byID[c.GetId()] = encodedContainer{state: c.GetState(), data: data}
	return data, nil
}

// forget drops a removed container's encoding.
func (e *encodedContainers) forget(id string) {
	e.mu.Lock()
	delete(e.byID, id)
	e.mu.Unlock()
}
