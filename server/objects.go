package server

import (
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/stats"
	"github.com/minicri/minicri/store"
)

// Each sandbox and each container has one object, everything the daemon
// holds in memory of it: its record (in the embedded store.Slot), its lock
// and the rest below. The store tables keep them (server.go): an object
// comes with its record, found at start or put, or just before it, when a
// create takes its lock before writing the record (Table.Add); and it goes
// with its record (Table.Delete), so that nothing of a removed container or
// sandbox can be forgotten in some other map. The record is read through
// the table (Get, List), which sees it only once it is on disk.

// container is everything the daemon holds in memory for one container;
// deleting it drops all of it at once.
type container struct {
	store.Slot[lifecycle.ContainerRecord]
	id string
	// lock serialises the calls that change the container (see the lock
	// discipline in locks.go). It is held across runtime calls; mu is not.
	lock sync.Mutex
	// exited is closed once the container's exit is recorded:
	// StopContainer and execs wait on it instead of polling.
	exited chan struct{}

	mu sync.Mutex // guards exitDone to exitedDuringStart; held only briefly
	// exitDone tells whether exited is closed.
	exitDone bool
	// process is the container's own process from its bundle's
	// config.json, read at the first exec: exec probes run every few
	// seconds, and the spec never changes after create. Shared: do not
	// change it.
	process *specs.Process
	// cpu is the last CPU sample, for usage_nano_cores.
	cpu stats.CPUSample
	// starting is set while StartContainer runs, exitedDuringStart when the
	// exit was recorded meanwhile (see transition).
	starting, exitedDuringStart bool

	// placed is the monitor the container has a place in, from its
	// placement until its exit is recorded; guarded by monitorPlacement's
	// mu, which counts the places of each monitor.
	placed *placedMonitor
}

// sandbox is what the daemon holds in memory for one pod sandbox.
type sandbox struct {
	store.Slot[lifecycle.SandboxRecord]
	id   string
	lock sync.Mutex // serialises the calls that change the sandbox

	mu  sync.Mutex      // guards cpu
	cpu stats.CPUSample // the pod's last CPU sample, for usage_nano_cores
}

func newContainer(id string) *container {
	return &container{id: id, exited: make(chan struct{})}
}

func newSandbox(id string) *sandbox { return &sandbox{id: id} }

// ctr returns the object of container id. One that has none, because it
// was removed or never was, gets a detached object that nothing keeps: its
// lock guards nothing anyone else takes and what is put into it is
// dropped, which is what a removed container is due.
func (s *Server) ctr(id string) *container {
	return objectOf(s.containers, id, newContainer)
}

// pod is ctr for sandboxes.
func (s *Server) pod(id string) *sandbox {
	return objectOf(s.sandboxes, id, newSandbox)
}

func objectOf[T any, O store.Object[T]](t *store.Table[T, O], id string, detached func(id string) O) O {
	if obj, ok := t.Object(id); ok {
		return obj
	}
	return detached(id)
}

// markExited closes the container's exit channel, once however often it is
// called.
func (c *container) markExited() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.exitDone {
		c.exitDone = true
		close(c.exited)
	}
}

// nanoCores is Next on the container's sample.
func (c *container) nanoCores(at int64, usage uint64) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cpu.Next(at, usage)
}

// lastUsage is the cumulative CPU time of the container's last sample.
func (c *container) lastUsage() (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cpu.Last()
}

// nanoCores is Next on the pod's sample.
func (sb *sandbox) nanoCores(at int64, usage uint64) (uint64, bool) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.cpu.Next(at, usage)
}
