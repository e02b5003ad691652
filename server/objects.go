package server

import (
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// objects holds what the daemon keeps in memory for each sandbox and each
// container beside its record: one object per ID, added when the object is
// created (or found at start) and deleted with its record, so that nothing
// of a removed container or sandbox can be forgotten in some other map.
//
// The records themselves stay in the store tables (store.Table): they are
// the truth on disk, and the tables' versions are what ListContainers'
// kept answer is checked against.
type objects struct {
	mu         sync.Mutex
	containers map[string]*container
	sandboxes  map[string]*sandbox
}

// container is everything the daemon holds in memory for one container;
// deleting it drops all of it at once.
type container struct {
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
	// encoded is its entry of the kept ListContainers answer (see
	// encodedContainers); it goes with the object, so a removed container's
	// encoding cannot outlive it.
	encoded encodedContainer
	// cpu is the last CPU sample, for usage_nano_cores.
	cpu cpuSample
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
	id   string
	lock sync.Mutex // serialises the calls that change the sandbox

	mu  sync.Mutex // guards cpu
	cpu cpuSample  // the pod's last CPU sample, for usage_nano_cores
}

func newContainer(id string) *container {
	return &container{id: id, exited: make(chan struct{})}
}

func newSandbox(id string) *sandbox { return &sandbox{id: id} }

// addContainer makes the object of a container about to be created, or found
// at start; it returns the one there if there is one.
func (o *objects) addContainer(id string) *container {
	o.mu.Lock()
	defer o.mu.Unlock()
	return addLocked(&o.containers, id, newContainer)
}

// addSandbox is addContainer for sandboxes.
func (o *objects) addSandbox(id string) *sandbox {
	o.mu.Lock()
	defer o.mu.Unlock()
	return addLocked(&o.sandboxes, id, newSandbox)
}

// container returns the object of id. A container that has a record but no
// object yet (one a test wrote straight into the table) gets one. One that
// has neither, because it was removed or never was, gets a detached object
// that nothing keeps: its lock guards nothing anyone else takes and what is
// put into it is dropped, which is what a removed container is due. The
// record is looked at under mu, and delete takes mu after the record is
// gone, so an object is never added after its container's delete.
func (o *objects) container(id string, recorded func(id string) bool) *container {
	return lookup(o, &o.containers, id, recorded, newContainer)
}

// sandbox is container for sandboxes.
func (o *objects) sandbox(id string, recorded func(id string) bool) *sandbox {
	return lookup(o, &o.sandboxes, id, recorded, newSandbox)
}

func lookup[T any](o *objects, m *map[string]*T, id string, recorded func(id string) bool, make func(id string) *T) *T {
	o.mu.Lock()
	defer o.mu.Unlock()
	if obj, ok := (*m)[id]; ok {
		return obj
	}
	if recorded(id) {
		return addLocked(m, id, make)
	}
	return make(id)
}

// addLocked returns the object of id in m, made and added if there is none.
// The caller holds the objects' mu.
func addLocked[T any](m *map[string]*T, id string, make func(id string) *T) *T {
	if obj, ok := (*m)[id]; ok {
		return obj
	}
	if *m == nil {
		*m = map[string]*T{}
	}
	obj := make(id)
	(*m)[id] = obj
	return obj
}

// deleteContainer drops everything held in memory for a container. Called
// after its record is deleted (see container).
func (o *objects) deleteContainer(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.containers, id)
}

// deleteSandbox is deleteContainer for sandboxes.
func (o *objects) deleteSandbox(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.sandboxes, id)
}

// ctr is the object of the container id (see objects.container).
func (s *Server) ctr(id string) *container {
	return s.objs.container(id, s.containerExists)
}

// pod is the object of the sandbox id (see objects.sandbox).
func (s *Server) pod(id string) *sandbox {
	return s.objs.sandbox(id, s.sandboxExists)
}

// containerExists reports whether a container still has its record.
func (s *Server) containerExists(id string) bool {
	_, err := s.containers.Get(id)
	return err == nil
}

func (s *Server) sandboxExists(id string) bool {
	_, err := s.sandboxes.Get(id)
	return err == nil
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
