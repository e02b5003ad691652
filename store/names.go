package store

import (
	"errors"
	"fmt"
	"sync"
)

// ErrNameReserved is returned when a name already belongs to another ID.
var ErrNameReserved = errors.New("name is reserved")

// Names reserves unique names for IDs. The CRI requires that a sandbox or
// container name (built from its metadata) is used by one object at a time,
// so that a kubelet retry after a timeout cannot create a twin.
type Names struct {
	mu   sync.Mutex
	byID map[string]string // name → ID
}

// NewNames returns an empty reservation set.
func NewNames() *Names { return &Names{byID: map[string]string{}} }

// Reserve gives name to id. Reserving a name again for the same id succeeds.
func (n *Names) Reserve(name, id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if owner, ok := n.byID[name]; ok && owner != id {
		return &ReservedError{Name: name, Owner: owner}
	}
	n.byID[name] = id
	return nil
}

// Release frees name if it still belongs to id.
func (n *Names) Release(name, id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.byID[name] == id {
		delete(n.byID, name)
	}
}

// ReservedError names the ID that holds a name.
type ReservedError struct {
	Name, Owner string
}

func (e *ReservedError) Error() string {
	return fmt.Sprintf("name %q is reserved by %s", e.Name, e.Owner)
}

// Is makes errors.Is(err, ErrNameReserved) true.
func (e *ReservedError) Is(target error) bool { return target == ErrNameReserved }
