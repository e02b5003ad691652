package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/minicri/minicri/internal/atomicfile"
)

// ErrNotFound is returned for an ID no record has.
var ErrNotFound = errors.New("not found")

// ErrAmbiguousID is returned for an ID prefix that matches several records.
var ErrAmbiguousID = errors.New("ambiguous ID prefix")

// Table is the set of records of one kind: a JSON file per record under one
// directory, and an in-memory copy of all of them so that reads never touch
// the disk. Every method is safe for concurrent use; no lock is held across
// calls.
//
// Records are values: Get and List return copies of the struct, but slices and
// maps inside a record are shared, so callers replace them and never mutate
// them in place.
//
// Writes are serialised by writeMu, held across the file write and its two
// fsyncs; the map's lock mu is taken only to publish the written record, so
// Get, List and Resolve never wait for a disk. A reader sees a change only
// once it is on disk (Observe: or once its write failed).
type Table[T any] struct {
	dir string
	// writeMu orders the writers (Put, Update, Observe, Delete): it is held
	// from reading a record to publishing it, so that two updates of one
	// record cannot lose each other's change. The map is changed only under
	// both locks, so a holder of writeMu reads it without mu.
	writeMu sync.Mutex
	mu      sync.RWMutex
	items   map[string]T
	// ids are the keys of items, sorted: List and Resolve walk them instead
	// of sorting or scanning the map on every call (the kubelet lists every
	// second). Changed with items, under both locks.
	ids []string
	// version counts the changes of items, under both locks: see Version.
	version uint64
	// write replaces a record file durably; a test slows it down.
	write func(path string, data []byte, perm os.FileMode) error
	// stage replaces a record file without making it durable (Stage).
	stage func(path string, data []byte, perm os.FileMode) error
}

// Corrupt describes a record file that could not be read at Open.
type Corrupt struct {
	Path string
	Err  error
}

// Open loads every record under dir, creating dir if needed. Temp files of
// interrupted writes are removed. Records that do not parse are returned as
// corrupt (and left on disk for the operator) rather than failing the open:
// one bad file must not keep the node's runtime from starting.
func Open[T any](dir string) (*Table[T], []Corrupt, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	t := &Table[T]{dir: dir, items: map[string]T{}, write: atomicfile.Write, stage: atomicfile.Replace}
	var corrupt []Corrupt
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		if atomicfile.IsTemp(name) {
			_ = os.Remove(path)
			continue
		}
		id, ok := strings.CutSuffix(name, ".json")
		if !ok || e.IsDir() {
			continue
		}
		var v T
		data, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(data, &v)
		}
		if err != nil {
			corrupt = append(corrupt, Corrupt{Path: path, Err: err})
			continue
		}
		t.items[id] = v
		t.ids = append(t.ids, id)
	}
	slices.Sort(t.ids)
	return t, corrupt, nil
}

// Put writes a record durably, replacing any with the same ID.
func (t *Table[T]) Put(id string, v T) error {
	return t.put(id, v, t.write)
}

// Stage is Put without the fsyncs: the record is replaced atomically, and a
// crash of the process keeps it (the page cache outlives the process), but a
// crash of the machine may lose it. It is for the states a call writes
// before making things, and then supersedes with a Put of the same record
// before it answers: what such a record names is either gone after a reboot
// (the run dir is a tmpfs) or found by the caller's start-up sweep of what no
// record names. The Put's fsyncs then make the last state durable.
func (t *Table[T]) Stage(id string, v T) error {
	return t.put(id, v, t.stage)
}

func (t *Table[T]) put(id string, v T, write func(string, []byte, os.FileMode) error) error {
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

// publish makes a written record visible to readers. The caller holds
// writeMu.
func (t *Table[T]) publish(id string, v T) {
	t.mu.Lock()
	if _, ok := t.items[id]; !ok {
		i, _ := slices.BinarySearch(t.ids, id)
		t.ids = slices.Insert(t.ids, i, id)
	}
	t.items[id] = v
	t.version++
	t.mu.Unlock()
}

// Update reads a record, lets fn change it, and writes it back, all under the
// table's lock so that two updates of one record cannot lose each other's
// change. fn must be quick: it must not call into the table or block.
func (t *Table[T]) Update(id string, fn func(*T) error) (T, error) {
	return t.modify(id, fn, false, t.write)
}

// StageUpdate is Update without the fsyncs, for a change that the start-up
// repair derives again when a crash of the machine loses it (see Stage).
func (t *Table[T]) StageUpdate(id string, fn func(*T) error) (T, error) {
	return t.modify(id, fn, false, t.stage)
}

// Observe is Update for a change that has already happened outside (a
// process exited): when the write fails, on a full or read-only disk, the
// in-memory record keeps the change anyway and the write's error is
// returned. Memory must not keep saying "running" about a process that is
// gone; the disk catches up at the next write, or the caller's start-up
// repair derives the change again from where it was observed.
func (t *Table[T]) Observe(id string, fn func(*T) error) (T, error) {
	return t.modify(id, fn, true, t.write)
}

// modify is Update and Observe: keepOnWriteError says whether memory takes
// the change when the disk does not.
func (t *Table[T]) modify(id string, fn func(*T) error, keepOnWriteError bool, write func(string, []byte, os.FileMode) error) (T, error) {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	old, ok := t.items[id] // no mu: only holders of writeMu change the map
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
func (t *Table[T]) Get(id string) (T, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	v, ok := t.items[id]
	if !ok {
		return v, fmt.Errorf("record %s: %w", id, ErrNotFound)
	}
	return v, nil
}

// Resolve turns a full ID or a unique prefix of one (crictl shows truncated
// IDs, and users paste them) into the full ID.
func (t *Table[T]) Resolve(idOrPrefix string) (string, error) {
	if idOrPrefix == "" {
		return "", fmt.Errorf("empty ID: %w", ErrNotFound)
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if _, ok := t.items[idOrPrefix]; ok {
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

// Delete removes a record. Deleting one that is not there succeeds: removal
// is retried by the kubelet and by start-up repair.
func (t *Table[T]) Delete(id string) error {
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
		delete(t.items, id)
		t.version++
	}
	t.mu.Unlock()
	return err
}

// Version counts the table's changes: a List or Range that follows a
// Version call sees at least the records of that version, and a later
// call that returns the same Version means nothing changed in between. A
// caller that keeps something derived from every record (ListContainers'
// answer) tells by it whether that is still true.
func (t *Table[T]) Version() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.version
}

// List returns every record, ordered by ID so that answers are stable.
func (t *Table[T]) List() []T {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]T, len(t.ids))
	for i, id := range t.ids {
		out[i] = t.items[id]
	}
	return out
}

// Range calls fn with each record, in ID order, until fn returns false,
// copying none into a slice: the kubelet's list calls walk every record
// every second. fn runs under the table's read lock, so it must neither
// call the table nor block.
func (t *Table[T]) Range(fn func(T) bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, id := range t.ids {
		if !fn(t.items[id]) {
			return
		}
	}
}

func (t *Table[T]) path(id string) string { return filepath.Join(t.dir, id+".json") }
