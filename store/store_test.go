package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/minicri/minicri/internal/atomicfile"
)

type record struct {
	Name  string
	Count int
}

// testObject is what a caller keeps of each record: here, its ID only.
type testObject[T any] struct {
	Slot[T]
	id string
}

func openTest[T any](dir string) (*Table[T, *testObject[T]], []Corrupt, error) {
	return Open(dir, func(id string) *testObject[T] { return &testObject[T]{id: id} })
}

func TestTablePersistsAcrossOpen(t *testing.T) {
	dir := t.TempDir()
	tab, _, err := openTest[record](dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.Put("abc123", record{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := tab.Put("abd456", record{Name: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := tab.Delete("abd456"); err != nil {
		t.Fatal(err)
	}
	// What a crash mid-write leaves: a temp file, and a torn record elsewhere.
	if err := os.WriteFile(filepath.Join(dir, atomicfile.TempPrefix+"x.json-1"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "torn.json"), []byte("{\"Na"), 0o600); err != nil {
		t.Fatal(err)
	}

	again, corrupt, err := openTest[record](dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := again.Get("abc123"); err != nil || got.Name != "a" {
		t.Fatalf("Get after reopen = %+v, %v", got, err)
	}
	if _, err := again.Get("abd456"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted record came back: %v", err)
	}
	if len(corrupt) != 1 || filepath.Base(corrupt[0].Path) != "torn.json" {
		t.Fatalf("corrupt = %+v, want torn.json", corrupt)
	}
	if _, err := os.Stat(filepath.Join(dir, atomicfile.TempPrefix+"x.json-1")); !os.IsNotExist(err) {
		t.Fatalf("temp file of an interrupted write survived Open: %v", err)
	}
}

// Open reads the records side by side: every record of a big table comes
// back with its own content, and each torn one is reported, none lost.
func TestOpenReadsEveryRecordOfABigTable(t *testing.T) {
	dir := t.TempDir()
	tab, _, err := openTest[record](dir)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := range n {
		id := fmt.Sprintf("r%03d", i)
		if i%50 == 7 {
			if err := os.WriteFile(filepath.Join(dir, id+".json"), []byte("{\"Na"), 0o600); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := tab.Stage(id, record{Name: id, Count: i}); err != nil {
			t.Fatal(err)
		}
	}
	again, corrupt, err := openTest[record](dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		id := fmt.Sprintf("r%03d", i)
		got, err := again.Get(id)
		if i%50 == 7 {
			if err == nil {
				t.Errorf("torn %s opened as %+v", id, got)
			}
			continue
		}
		if err != nil || got != (record{Name: id, Count: i}) {
			t.Errorf("%s after reopen = %+v, %v", id, got, err)
		}
	}
	if len(corrupt) != n/50 {
		t.Errorf("%d corrupt records reported, want %d: %+v", len(corrupt), n/50, corrupt)
	}
	if ids := again.List(); len(ids) != n-n/50 {
		t.Errorf("List has %d records, want %d", len(ids), n-n/50)
	}
}

// Open reuses a read buffer from record to record: records of every size,
// read in any order on any worker, come back whole and with nothing of the
// one read before, and a record that cannot be read is reported.
func TestOpenReadsRecordsOfEverySize(t *testing.T) {
	dir := t.TempDir()
	tab, _, err := openTest[record](dir)
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{70000, 0, 4095, 3, 4096, 5000, 1, 4097, 200000, 17}
	for round := range 3 {
		for i, size := range sizes {
			id := fmt.Sprintf("r%d-%02d", round, i)
			if err := tab.Stage(id, record{Name: strings.Repeat("x", size), Count: i}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Symlink(filepath.Join(dir, "gone"), filepath.Join(dir, "dangling.json")); err != nil {
		t.Fatal(err)
	}
	again, corrupt, err := openTest[record](dir)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		for i, size := range sizes {
			id := fmt.Sprintf("r%d-%02d", round, i)
			got, err := again.Get(id)
			if err != nil || got.Name != strings.Repeat("x", size) || got.Count != i {
				t.Errorf("%s after reopen: %d-byte name, count %d, %v; want %d bytes, count %d", id, len(got.Name), got.Count, err, size, i)
			}
		}
	}
	if len(corrupt) != 1 || filepath.Base(corrupt[0].Path) != "dangling.json" || !errors.Is(corrupt[0].Err, os.ErrNotExist) {
		t.Errorf("corrupt = %+v, want dangling.json, not found", corrupt)
	}
}

func TestResolvePrefix(t *testing.T) {
	tab, _, _ := openTest[record](t.TempDir())
	_ = tab.Put("abc123", record{})
	_ = tab.Put("abd456", record{})
	cases := []struct {
		in      string
		want    string
		wantErr error
	}{
		{"abc123", "abc123", nil},
		{"abc", "abc123", nil},
		{"ab", "", ErrAmbiguousID},
		{"zz", "", ErrNotFound},
		{"", "", ErrNotFound},
	}
	for _, c := range cases {
		got, err := tab.Resolve(c.in)
		if got != c.want || !errors.Is(err, c.wantErr) {
			t.Errorf("Resolve(%q) = %q, %v; want %q, %v", c.in, got, err, c.want, c.wantErr)
		}
	}
}

// TestListFollowsChanges: List and Range answer in ID order whatever the
// order of the writes, after updates, deletes and a reopen, and Resolve
// finds prefixes in the same sorted list.
func TestListFollowsChanges(t *testing.T) {
	dir := t.TempDir()
	tab, _, _ := openTest[record](dir)
	names := func(tab *Table[record, *testObject[record]]) string {
		var out []string
		for _, r := range tab.List() {
			out = append(out, r.Name)
		}
		return strings.Join(out, ",")
	}
	steps := []struct {
		what string
		do   func() error
		want string
	}{
		{"puts out of order", func() error {
			for _, id := range []string{"c3", "a1", "b2"} {
				if err := tab.Put(id, record{Name: id}); err != nil {
					return err
				}
			}
			return nil
		}, "a1,b2,c3"},
		{"an update keeps one entry", func() error {
			_, err := tab.Update("b2", func(r *record) error { r.Name = "B2"; return nil })
			return err
		}, "a1,B2,c3"},
		{"a put over a record keeps one entry", func() error { return tab.Stage("c3", record{Name: "C3"}) }, "a1,B2,C3"},
		{"delete the first", func() error { return tab.Delete("a1") }, "B2,C3"},
		{"delete one not there", func() error { return tab.Delete("zz") }, "B2,C3"},
		{"put it back, and one after the rest", func() error {
			if err := tab.Put("a1", record{Name: "a1"}); err != nil {
				return err
			}
			return tab.Put("d4", record{Name: "d4"})
		}, "a1,B2,C3,d4"},
	}
	for _, st := range steps {
		before := tab.Version()
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
		got := names(tab)
		if got != st.want {
			t.Fatalf("after %s: List = %s, want %s", st.what, got, st.want)
		}
		// Version moves with every change, and only then: a caller
		// keeping what it derived from the records relies on both.
		changed := st.what != "delete one not there"
		if moved := tab.Version() != before; moved != changed {
			t.Fatalf("after %s: Version moved %v, want %v", st.what, moved, changed)
		}
	}
	v := tab.Version()
	tab.List()
	tab.Range(func(record) bool { return true })
	if _, err := tab.Get("b2"); err != nil || tab.Version() != v {
		t.Fatalf("reads moved the Version (%d, was %d) or Get failed: %v", tab.Version(), v, err)
	}
	var walked []string
	tab.Range(func(r record) bool {
		walked = append(walked, r.Name)
		return r.Name != "C3"
	})
	if got := strings.Join(walked, ","); got != "a1,B2,C3" {
		t.Fatalf("Range walked %s, want a1,B2,C3 and a stop there", got)
	}
	again, _, err := openTest[record](dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(again); got != "a1,B2,C3,d4" {
		t.Fatalf("after reopen: List = %s", got)
	}
	if id, err := again.Resolve("d"); id != "d4" || err != nil {
		t.Fatalf("Resolve(d) = %q, %v after reopen", id, err)
	}
}

// BenchmarkList200 is the kubelet's ListContainers at 200 containers, the
// store's part.
func BenchmarkList200(b *testing.B) {
	tab, _, _ := openTest[record](b.TempDir())
	for i := range 200 {
		_ = tab.Stage(fmt.Sprintf("%064x", i*7919), record{Name: "c"})
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(tab.List()) != 200 {
			b.Fatal("short list")
		}
	}
}

func TestUpdateIsAtomicUnderConcurrency(t *testing.T) {
	tab, _, _ := openTest[record](t.TempDir())
	_ = tab.Put("id", record{})
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = tab.Update("id", func(r *record) error { r.Count++; return nil })
		}()
	}
	wg.Wait()
	if got, _ := tab.Get("id"); got.Count != 20 {
		t.Fatalf("count = %d after 20 concurrent updates, want 20", got.Count)
	}
	failing := fmt.Errorf("refused")
	if _, err := tab.Update("id", func(r *record) error { r.Count = -1; return failing }); !errors.Is(err, failing) {
		t.Fatalf("Update error = %v", err)
	}
	if got, _ := tab.Get("id"); got.Count != 20 {
		t.Fatalf("a failed update changed the record: %d", got.Count)
	}
	if _, err := tab.Update("missing", func(*record) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Update of a missing record: %v", err)
	}
}

func TestNames(t *testing.T) {
	n := NewNames()
	if err := n.Reserve("pod_ns_uid_0", "id1"); err != nil {
		t.Fatal(err)
	}
	if err := n.Reserve("pod_ns_uid_0", "id1"); err != nil {
		t.Fatalf("re-reserving for the same ID: %v", err)
	}
	err := n.Reserve("pod_ns_uid_0", "id2")
	var reserved *ReservedError
	if !errors.Is(err, ErrNameReserved) || !errors.As(err, &reserved) || reserved.Owner != "id1" {
		t.Fatalf("Reserve by another ID = %v, want ErrNameReserved naming id1", err)
	}
	n.Release("pod_ns_uid_0", "id2") // not the owner: no effect
	if err := n.Reserve("pod_ns_uid_0", "id2"); err == nil {
		t.Fatal("a release by a non-owner freed the name")
	}
	n.Release("pod_ns_uid_0", "id1")
	if err := n.Reserve("pod_ns_uid_0", "id2"); err != nil {
		t.Fatalf("name not free after release: %v", err)
	}
}

// Stage and StageUpdate skip the durable writer (its fsyncs) but still
// replace the file, so that a restarted process reads them; Put and Update
// go through it.
func TestStageWritesWithoutTheDurableWriter(t *testing.T) {
	dir := t.TempDir()
	tab, _, err := openTest[record](dir)
	if err != nil {
		t.Fatal(err)
	}
	durable := 0
	tab.write = func(path string, data []byte, perm os.FileMode) error {
		durable++
		return atomicfile.Write(path, data, perm)
	}
	if err := tab.Stage("a", record{Name: "creating"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.StageUpdate("a", func(r *record) error { r.Count++; return nil }); err != nil {
		t.Fatal(err)
	}
	if durable != 0 {
		t.Fatalf("Stage and StageUpdate wrote durably %d times, want 0", durable)
	}
	again, _, err := openTest[record](dir)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := again.Get("a"); err != nil || r != (record{Name: "creating", Count: 1}) {
		t.Fatalf("staged record after Open = %+v, %v", r, err)
	}
	if err := tab.Put("a", record{Name: "ready"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Update("a", func(r *record) error { r.Count++; return nil }); err != nil {
		t.Fatal(err)
	}
	if durable != 2 {
		t.Fatalf("Put and Update wrote durably %d times, want 2", durable)
	}
}

// An object added before its record (a create holding its lock) is found
// by Object but by no reader until its record is written into it; Forget
// drops it only while it has none, and Delete drops it with its record.
func TestObjectComesAndGoesWithItsRecord(t *testing.T) {
	dir := t.TempDir()
	tab, _, err := openTest[record](dir)
	if err != nil {
		t.Fatal(err)
	}
	version := tab.Version()
	added := tab.Add("abc")
	if _, err := tab.Get("abc"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of an object with no record yet: %v, want ErrNotFound", err)
	}
	if _, err := tab.Resolve("ab"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Resolve of an object with no record yet: %v, want ErrNotFound", err)
	}
	if n := len(tab.List()); n != 0 || tab.Version() != version {
		t.Errorf("List has %d records and the version moved %d -> %d before any record", n, version, tab.Version())
	}
	if obj, ok := tab.Object("abc"); !ok || obj != added {
		t.Errorf("Object of an added ID = %p, %v; want the added one", obj, ok)
	}

	if err := tab.Put("abc", record{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if obj, _ := tab.Object("abc"); obj != added || added.rec.Name != "a" {
		t.Errorf("Put made another object, or left the record out of the added one")
	}
	tab.Forget("abc")
	if obj, ok := tab.Object("abc"); !ok || obj != added {
		t.Error("Forget dropped an object that holds a record")
	}

	if err := tab.Delete("abc"); err != nil {
		t.Fatal(err)
	}
	if _, ok := tab.Object("abc"); ok {
		t.Error("Delete left the object of the deleted record")
	}
	tab.Add("abd")
	tab.Forget("abd")
	if _, ok := tab.Object("abd"); ok {
		t.Error("Forget left an object that never had a record")
	}

	// Open makes the object of each record; Put one for a record without.
	if err := tab.Put("xyz", record{Name: "x"}); err != nil {
		t.Fatal(err)
	}
	again, _, err := openTest[record](dir)
	if err != nil {
		t.Fatal(err)
	}
	if obj, ok := again.Object("xyz"); !ok || obj.id != "xyz" || obj.rec.Name != "x" {
		t.Errorf("object of a record after Open = %+v, %v", obj, ok)
	}
}
