package oci

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// The test's own process stands in for a container's: its descriptors are
// counted from the real /proc, a socket it opens among them.
func TestReadProcessStatsCountsFilesAndSockets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	self := strconv.Itoa(os.Getpid())
	want, _ := os.ReadDir(filepath.Join("/proc", self, "fd"))
	for _, v2 := range []bool{false, true} {
		root := t.TempDir()
		procs := filepath.Join(root, "pod", "c", "cgroup.procs")
		if !v2 {
			procs = filepath.Join(root, "memory", "pod", "c", "cgroup.procs")
		}
		// A pid that is gone counts as a process with no files.
		writeCgroupFiles(t, filepath.Dir(procs), map[string]string{"cgroup.procs": self + "\n999999999\n"})
		st, err := readProcessStats(root, v2, "/pod/c")
		if err != nil {
			t.Fatal(err)
		}
		if st.Processes != 2 {
			t.Errorf("cgroup2=%v: %d processes, want 2", v2, st.Processes)
		}
		// The count opens a descriptor of its own while it reads.
		if st.FileDescriptors < 3 || st.FileDescriptors < uint64(len(want))-1 || st.FileDescriptors > uint64(len(want))+2 {
			t.Errorf("cgroup2=%v: %d descriptors, want about the %d of /proc/self/fd", v2, st.FileDescriptors, len(want))
		}
		if st.Sockets < 1 || st.Sockets >= st.FileDescriptors {
			t.Errorf("cgroup2=%v: %d sockets of %d descriptors, want the listener's among them", v2, st.Sockets, st.FileDescriptors)
		}
	}
	if _, err := readProcessStats(t.TempDir(), true, "/pod/gone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("process stats of a missing cgroup: %v, want ErrNotFound", err)
	}
}
