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
	return listCodec{proto: encoding.GetCodecV2(grpcproto.Name), containers: &s.encodedContainers, object: s.ctr}
}

type listCodec struct {
	proto      encoding.CodecV2
	containers *encodedContainers
	object     func(id string) *container
}

// Name is the protobuf codec's: clients see no other content type.
func (c listCodec) Name() string { return grpcproto.Name }

func (c listCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c listCodec) Marshal(v any) (mem.BufferSlice, error) {
	if batch, ok := v.(*runtime.StreamContainersResponse); ok {
		// A StreamContainers batch is, on the wire, a ListContainersResponse
		// of its containers (TestStreamContainersBatchIsAListOnTheWire).
		return c.containers.encode(&runtime.ListContainersResponse{Containers: batch.GetContainers()}, c.object)
	}
	resp, ok := v.(*runtime.ListContainersResponse)
	if !ok {
		return c.proto.Marshal(v)
	}
	return c.containers.encode(resp, c.object)
}

// containersField is the number of ListContainersResponse's only field,
// its repeated containers.
var containersField = (&runtime.ListContainersResponse{}).ProtoReflect().Descriptor().Fields().ByName("containers").Number()

// encodedContainers puts a ListContainers answer together from the
// encoding of each container's entry, kept in the container's object. An
// entry is a record's ID, sandbox, metadata, image, creation time, labels
// and annotations, which never change for an ID, and its state, which is
// compared: a container in another state is encoded again.
//
// It also keeps the last answer listing every container, with the version
// of the containers table it was made from, and that answer's encoding
// once made: while the table does not change, that answer is sent again as
// it is, neither walked nor encoded.
//
// Neither ever holds a removed container, though an answer is made (by the
// handler) and encoded (by grpc, after the handler returned) with no lock
// held between, and a removal may land anywhere in that gap: an encoding
// goes into the container's object, which the removal drops, and a
// removed container has none to put it in (see Server.ctr); an
// answer is kept only if it was made from a version of the table at or
// after the last removal.
type encodedContainers struct {
	mu sync.Mutex

	every        *runtime.ListContainersResponse
	everyVersion uint64
	everyData    []byte // nil until encode made it; never changed after
	// removedAt is the table's version just after the last removal: an
	// answer made from an earlier one may list the removed container.
	removedAt uint64

	// beforeKeep, set by tests, runs between an answer's walk of the table
	// and its keeping: where a removal must not slip through.
	beforeKeep func()
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
	if e.beforeKeep != nil {
		e.beforeKeep()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if version < e.removedAt {
		return // it may list a container removed since
	}
	if e.every == nil || version >= e.everyVersion {
		e.every, e.everyVersion, e.everyData = resp, version, nil
	}
}

// encode writes resp as proto.Marshal would, field for field (map entries
// aside, whose order protobuf leaves open). The kept answer listing every
// container is encoded once, into memory it keeps, and then sent from it;
// any other answer goes into a buffer of grpc's pool that grpc returns once
// it is sent. object finds the object a container's encoding is kept in.
func (e *encodedContainers) encode(resp *runtime.ListContainersResponse, object func(id string) *container) (mem.BufferSlice, error) {
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
		data, err := encodingOf(c, object)
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

// encodingOf returns c's kept encoding, or makes it and keeps it in c's
// object: that of a container removed since the answer was made is dropped
// with it.
func encodingOf(c *runtime.Container, object func(id string) *container) ([]byte, error) {
	obj := object(c.GetId())
	obj.mu.Lock()
	kept := obj.encoded
	obj.mu.Unlock()
	if kept.data != nil && kept.state == c.GetState() {
		return kept.data, nil
	}
	data, err := proto.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode container %s: %w", c.GetId(), err)
	}
	obj.mu.Lock()
	obj.encoded = encodedContainer{state: c.GetState(), data: data}
	obj.mu.Unlock()
	return data, nil
}

// removed drops the kept answer that may list a container just removed.
// It is called after the record is deleted, with the table's version from
// then: a keepEvery that comes later sees the answer's version older than
// the removal.
func (e *encodedContainers) removed(version uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if version > e.removedAt {
		e.removedAt = version
	}
	if e.every != nil && e.everyVersion < version {
		e.every, e.everyData = nil, nil
	}
}
