package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/atomicfile"
)

// ErrNotFound is returned for an ID no record has.
var ErrNotFound = errors.New("not found")

// ErrAmbiguousID is returned for an ID prefix that matches several records.
var ErrAmbiguousID = errors.New("ambiguous ID prefix")

// Table is the set of records of one kind: a JSON file per record under one
// directory, and in memory the caller's object of each, which holds its
// record, so that reads never touch the disk. The object is all the caller
// keeps in memory of what the record describes: it comes with the record
// (Put, Open) or before it (Add), and goes with it (Delete), so nothing of
// a deleted record can be forgotten in some other map. Every method is safe
// for concurrent use; no lock is held across calls.
//
// Records are values: Get and List return copies of the struct, but slices and
// maps inside a record are shared, so callers replace them and never mutate
// them in place.
//
// Writes are serialised by writeMu, held across the file write and its two
// fsyncs; the map's lock mu is taken only to publish the written record, so
// Get, List and Resolve never wait for a disk. A reader sees a change only
// once it is on disk (Observe: or once its write failed).
type Table[T any, O Object[T]] struct {
	dir string
	// writeMu orders the writers (Put, Update, Observe, Delete): it is held
	// from reading a record to publishing it, so that two updates of one
	// record cannot lose each other's change. Records are changed only
	// under both locks; objects without one come and go under mu alone
	// (Add, Forget), so even a holder of writeMu looks one up under mu.
	writeMu sync.Mutex
	// mu guards objects, ids and version, and the records in the objects
	// against a reader.
	mu sync.RWMutex
	// objects are the objects by ID: those with a record and those of a
	// create that has not written its record yet (Add).
	objects map[string]O
	// ids are the IDs of the objects that hold a record, sorted: List and
	// Resolve walk them instead of sorting or scanning the map on every call
	// (the kubelet lists every second). Changed with a record's coming and
	// going, under both locks.
	ids []string
	// version counts the changes of records, under both locks: see Version.
	version uint64
	// newObject makes the object of a record found at Open or put without
	// one.
	newObject func(id string) O
	// write replaces a record file durably; a test slows it down.
	write func(path string, data []byte, perm os.FileMode) error
	// stage replaces a record file without making it durable (Stage).
	stage func(path string, data []byte, perm os.FileMode) error
}

// Slot is where an object keeps its record: the caller's object type embeds
// it, and only the Table reads and writes it, under its locks, so that a
// reader sees a record only once it is written.
type Slot[T any] struct {
	rec T
	// recorded tells whether rec is a written record; an object added
	// before its record (Add) has none yet.
	recorded bool
}

func (s *Slot[T]) slot() *Slot[T] { return s }

// Object is what a Table keeps for each ID: a pointer to the caller's
// type, which embeds a Slot.
type Object[T any] interface {
	slot() *Slot[T]
}

// Corrupt describes a record file that could not be read at Open.
type Corrupt struct {
	Path string
	Err  error
}

// Open loads every record under dir, creating dir if needed, each into an
// object newObject makes. Temp files of interrupted writes are removed.
// Records that do not parse are returned as corrupt (and left on disk for
// the operator) rather than failing the open: one bad file must not keep
// the node's runtime from starting. The records are read and decoded on
// every CPU: at a daemon's start, hundreds of them are most of the wait
// before the recovery.
func Open[T any, O Object[T]](dir string, newObject func(id string) O) (*Table[T, O], []Corrupt, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	var ids []string
	for _, e := range entries {
		name := e.Name()
		if atomicfile.IsTemp(name) {
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		if id, ok := strings.CutSuffix(name, ".json"); ok && !e.IsDir() {
			ids = append(ids, id)
		}
	}
	recs := make([]T, len(ids))
	errs := make([]error, len(ids))
	// A buffer for each worker, reused from record to record: the decoder
	// copies what it keeps, and a buffer a record would be that much more
	// for the collector while the start allocates most.
	bufs := make([][]byte, runtime.GOMAXPROCS(0))
	eachIndex(len(ids), func(worker, i int) {
		data, err := readFile(filepath.Join(dir, ids[i]+".json"), bufs[worker][:0])
		if err == nil {
			err = json.Unmarshal(data, &recs[i])
		}
		bufs[worker], errs[i] = data, err
	})
	t := &Table[T, O]{dir: dir, objects: map[string]O{}, newObject: newObject, write: atomicfile.Write, stage: atomicfile.Replace}
	var corrupt []Corrupt
	for i, id := range ids {
		if errs[i] != nil {
			corrupt = append(corrupt, Corrupt{Path: filepath.Join(dir, id+".json"), Err: errs[i]})
			continue
		}
		obj := newObject(id)
		*obj.slot() = Slot[T]{rec: recs[i], recorded: true}
		t.objects[id] = obj
		t.ids = append(t.ids, id)
	}
	slices.Sort(t.ids)
	return t, corrupt, nil
}

// eachIndex calls fn for 0..n-1, on as many goroutines as there are CPUs,
// each numbered by worker, from 0 to below runtime.GOMAXPROCS(0).
func eachIndex(n int, fn func(worker, i int)) {
	workers := min(n, runtime.GOMAXPROCS(0))
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				fn(w, i)
			}
		}()
	}
	wg.Wait()
}

// readFile appends the file at path to buf. A start reads every record
// once: through an *os.File each read would also cost two fstats, the
// runtime's poller check and a cleanup to register, as much as the read.
func readFile(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return buf, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, 4096)
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		switch {
		case err == unix.EINTR:
		case err != nil:
			return buf, &os.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return buf, nil
		default:
			buf = buf[:len(buf)+n]
		}
	}
}

// Put writes a record durably, replacing any with the same ID.
func (t *Table[T, O]) Put(id string, v T) error {
	return t.put(id, v, t.write)
}

// Stage is Put without the fsyncs: the record is replaced atomically, and a
// crash of the process keeps it (the page cache outlives the process), but a
// crash of the machine may lose it. It is for the states a call writes
// before making things, and then supersedes with a Put of the same record
// before it answers: what such a record names is either gone after a reboot
// (the run dir is a tmpfs) or found by the caller's start-up sweep of what no
// record names. The Put's fsyncs then make the last state durable.
func (t *Table[T, O]) Stage(id string, v T) error {
	return t.put(id, v, t.stage)
}

func (t *Table[T, O]) put(id string, v T, write func(string, []byte, os.FileMode) error) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode record %s: %w", id, err)
	}
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	if err := write(t.path(id), data, 0o600); err != nil {
		return fmt.Errorf("store record %s: %w", id, err)
	}
	t.publish(id, v)
	return nil
}

// publish makes a written record visible to readers, in the object of id,
// made now if there is none. The caller holds writeMu.
func (t *Table[T, O]) publish(id string, v T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	slot := t.objectLocked(id).slot()
	if !slot.recorded {
		i, _ := slices.BinarySearch(t.ids, id)
		t.ids = slices.Insert(t.ids, i, id)
	}
	*slot = Slot[T]{rec: v, recorded: true}
	t.version++
}

// record returns the record of id. The caller holds mu, or writeMu.
func (t *Table[T, O]) record(id string) (T, bool) {
	obj, ok := t.objects[id]
	if !ok || !obj.slot().recorded {
		var zero T
		return zero, false
	}
	return obj.slot().rec, true
}

// Update reads a record, lets fn change it, and writes it back, all under the
// table's lock so that two updates of one record cannot lose each other's
// change. fn must be quick: it must not call into the table or block.
func (t *Table[T, O]) Update(id string, fn func(*T) error) (T, error) {
	return t.modify(id, fn, false, t.write)
}

// StageUpdate is Update without the fsyncs, for a change that the start-up
// repair derives again when a crash of the machine loses it (see Stage).
func (t *Table[T, O]) StageUpdate(id string, fn func(*T) error) (T, error) {
	return t.modify(id, fn, false, t.stage)
}

// Observe is Update for a change that has already happened outside (a
// process exited): when the write fails, on a full or read-only disk, the
// in-memory record keeps the change anyway and the write's error is
// returned. Memory must not keep saying "running" about a process that is
// gone; the disk catches up at the next write, or the caller's start-up
// repair derives the change again from where it was observed.
func (t *Table[T, O]) Observe(id string, fn func(*T) error) (T, error) {
	return t.modify(id, fn, true, t.write)
}

// modify is Update and Observe: keepOnWriteError says whether memory takes
// the change when the disk does not.
func (t *Table[T, O]) modify(id string, fn func(*T) error, keepOnWriteError bool, write func(string, []byte, os.FileMode) error) (T, error) {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	t.mu.RLock() // Add and Forget change the map under mu alone
	old, ok := t.record(id)
	t.mu.RUnlock()
	if !ok {
		var zero T
		return zero, fmt.Errorf("record %s: %w", id, ErrNotFound)
	}
	v := old
	if err := fn(&v); err != nil {
		return old, err
	}
	data, err := json.Marshal(v)
	if err == nil {
		err = write(t.path(id), data, 0o600)
	}
	if err != nil {
		if !keepOnWriteError {
			return old, fmt.Errorf("store record %s: %w", id, err)
		}
		t.publish(id, v)
		return v, fmt.Errorf("store record %s: %w", id, err)
	}
	t.publish(id, v)
	return v, nil
}

// Get returns the record with exactly this ID.
func (t *Table[T, O]) Get(id string) (T, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	v, ok := t.record(id)
	if !ok {
		return v, fmt.Errorf("record %s: %w", id, ErrNotFound)
	}
	return v, nil
}

// Resolve turns a full ID or a unique prefix of one (crictl shows truncated
// IDs, and users paste them) into the full ID.
func (t *Table[T, O]) Resolve(idOrPrefix string) (string, error) {
	if idOrPrefix == "" {
		return "", fmt.Errorf("empty ID: %w", ErrNotFound)
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if _, ok := t.record(idOrPrefix); ok {
		return idOrPrefix, nil
	}
	// The IDs with this prefix are a run of the sorted list, from the
	// first ID not below the prefix.
	i, _ := slices.BinarySearch(t.ids, idOrPrefix)
	if i == len(t.ids) || !strings.HasPrefix(t.ids[i], idOrPrefix) {
		return "", fmt.Errorf("%q: %w", idOrPrefix, ErrNotFound)
	}
	if i+1 < len(t.ids) && strings.HasPrefix(t.ids[i+1], idOrPrefix) {
		return "", fmt.Errorf("%q: %w", idOrPrefix, ErrAmbiguousID)
	}
	return t.ids[i], nil
}

// Delete removes a record, and its object with it. Deleting one that is not
// there succeeds: removal is retried by the kubelet and by start-up repair.
func (t *Table[T, O]) Delete(id string) error {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	if err := os.Remove(t.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete record %s: %w", id, err)
	}
	// The file is gone: memory follows even when the directory's sync fails.
	err := atomicfile.SyncDir(t.dir)
	t.mu.Lock()
	if i, ok := slices.BinarySearch(t.ids, id); ok {
		t.ids = slices.Delete(t.ids, i, i+1)
		t.version++
	}
	delete(t.objects, id)
	t.mu.Unlock()
	return err
}

// Version counts the table's changes: a List or Range that follows a
// Version call sees at least the records of that version, and a later
// call that returns the same Version means nothing changed in between. A
// caller that keeps something derived from every record (ListContainers'
// answer) tells by it whether that is still true.
func (t *Table[T, O]) Version() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.version
}

// List returns every record, ordered by ID so that answers are stable.
func (t *Table[T, O]) List() []T {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]T, len(t.ids))
	for i, id := range t.ids {
		out[i] = t.objects[id].slot().rec
	}
	return out
}

// Range calls fn with each record, in ID order, until fn returns false,
// copying none into a slice: the kubelet's list calls walk every record
// every second. fn runs under the table's read lock, so it must neither
// call the table nor block.
func (t *Table[T, O]) Range(fn func(T) bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, id := range t.ids {
		if !fn(t.objects[id].slot().rec) {
			return
		}
	}
}

// Add returns the object of id, made now, holding no record, if there is
// none: a create holds the object's lock before it writes the record. Until
// then readers see no record of id; Forget drops the object again when the
// create fails before.
func (t *Table[T, O]) Add(id string) O {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.objectLocked(id)
}

// objectLocked returns the object of id, made and kept if there is none.
// The caller holds mu.
func (t *Table[T, O]) objectLocked(id string) O {
	obj, ok := t.objects[id]
	if !ok {
		obj = t.newObject(id)
		t.objects[id] = obj
	}
	return obj
}

// Forget drops the object of id if it holds no record: the end of a create
// that failed before its record was written, or whose undo deleted it.
func (t *Table[T, O]) Forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if obj, ok := t.objects[id]; ok && !obj.slot().recorded {
		delete(t.objects, id)
	}
}

// Objects counts the objects: those with a record and those added before
// it.
func (t *Table[T, O]) Objects() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.objects)
}

// Object returns the object of id, with its record or before it (Add).
func (t *Table[T, O]) Object(id string) (O, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	obj, ok := t.objects[id]
	return obj, ok
}

func (t *Table[T, O]) path(id string) string { return filepath.Join(t.dir, id+".json") }
