package oci

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The file ownProcsFile picks for this process's own /proc/self/cgroup is
// one that lists this process: writing its PID there moves nothing.
func TestOwnProcsFileListsThisProcess(t *testing.T) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	procs := ownProcsFile(string(self), cgroupRoot)
	if procs == "" {
		t.Skipf("no cgroup hierarchy of this process is mounted under %s:\n%s", cgroupRoot, self)
	}
	data, err := os.ReadFile(procs)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Fields(string(data)), strconv.Itoa(os.Getpid())) {
		t.Errorf("%s, picked from\n%s\ndoes not list this process (%d)", procs, self, os.Getpid())
	}
}

// A line is only followed into a hierarchy of its own kind, and a line that
// names no mounted cgroup gives nothing: a wrong pick would move the daemon.
func TestOwnProcsFileRefusesWhatIsNoOwnCgroup(t *testing.T) {
	root := t.TempDir()
	// A v1-looking layout on a plain directory: cgroup.procs files that
	// are no cgroup's.
	for _, dir := range []string{"memory", "unified", "memory/pod"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dir, "cgroup.procs"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, lines := range []string{
		"4:memory:/pod\n",  // a file of that name, but no cgroup file system
		"0::/memory\n",     // a v2 path that names a v1-looking directory
		"0::/\n",           // no v2 hierarchy mounted
		"4:memory\n",       // no path
		"",                 // nothing
		"1:cpu:/missing\n", // no such hierarchy
		"garbage\n0:x\n\n", // not the format
	} {
		if got := ownProcsFile(lines, root); got != "" {
			t.Errorf("ownProcsFile(%q) = %s, want none", lines, got)
		}
	}
}

// The prime moves this process into the cgroup it is in: it succeeds, and
// the process is where it was.
func TestMoveSelfToOwnCgroupMovesNothing(t *testing.T) {
	requireRoot(t)
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if ownProcsFile(string(before), cgroupRoot) == "" {
		t.Skip("no cgroup hierarchy of this process is mounted")
	}
	if err := moveSelfToOwnCgroup("/proc/self/cgroup", cgroupRoot); err != nil {
		t.Fatalf("move into its own cgroup: %v", err)
	}
	after, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Errorf("the process moved:\nbefore\n%s\nafter\n%s", before, after)
	}
}
