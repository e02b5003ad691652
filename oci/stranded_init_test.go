package oci

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testHierarchy is a cgroup hierarchy the tests may make cgroups in: the
// pids one of a v1 host, or the v2 tree of a v2 host. Never the memory
// one, whose cgroups would take the test's processes out of the memory
// accounting they run under.
func testHierarchy(t *testing.T) cgroupMount {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, h := range cgroupHierarchies() {
		if h.options["pids"] || (h.v2 && h.point == cgroupRoot) {
			return h
		}
	}
	t.Skip("no pids hierarchy and no v2 tree under " + cgroupRoot)
	return cgroupMount{}
}

// makeCgroup makes the cgroup rel in h, removed at the end of the test.
func makeCgroup(t *testing.T, h cgroupMount, rel string) string {
	t.Helper()
	dir := filepath.Join(h.point, rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for d := dir; d != h.point; d = filepath.Dir(d) {
			_ = unix.Rmdir(d)
		}
	})
	return dir
}

// startIn starts sleep in the cgroup directory dir, or where the test runs
// when dir is "".
func startIn(t *testing.T, dir string, files ...*os.File) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.ExtraFiles = files
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatalf("move %d into %s: %v", cmd.Process.Pid, dir, err)
		}
	}
	return cmd
}

func exited(cmd *exec.Cmd, within time.Duration) bool {
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(within):
		return false
	}
}

// TestKillCgroupKillsOnlyTheContainersCgroup: the processes of the
// container's own cgroup are killed and the cgroup removed; a process that
// forges what the old search trusted (an exec.fifo under ROOT/ID/, a
// cgroup whose name contains the ID, a child cgroup of another name) keeps
// running, and its cgroups stay.
func TestKillCgroupKillsOnlyTheContainersCgroup(t *testing.T) {
	h := testHierarchy(t)
	base := "minicri-test-" + strconv.Itoa(os.Getpid())
	id := strings.Repeat("ab", 32)
	rel := "/" + base + "/pod/" + id
	ctr := makeCgroup(t, h, rel)
	forgedCgroup := makeCgroup(t, h, "/"+base+"/pod/x-"+id+"-x.scope")

	// The forger holds ROOT/ID/exec.fifo open, as a waiting init does.
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, id), 0o700); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(root, id, "exec.fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(fifo, unix.O_PATH, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	forger := startIn(t, forgedCgroup, f)
	bystander := startIn(t, "")
	stranded := []*exec.Cmd{startIn(t, ctr), startIn(t, ctr)}

	if err := killCgroup([]cgroupMount{h}, rel, 5*time.Second); err != nil {
		t.Fatalf("killCgroup: %v", err)
	}
	for _, cmd := range stranded {
		if !exited(cmd, 5*time.Second) {
			t.Errorf("process %d of the container's cgroup still runs", cmd.Process.Pid)
		}
	}
	if _, err := os.Stat(ctr); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the container's cgroup %s is still there (%v)", ctr, err)
	}
	for _, cmd := range []*exec.Cmd{forger, bystander} {
		if err := cmd.Process.Signal(unix.Signal(0)); err != nil {
			t.Errorf("process %d outside the container's cgroup was killed: %v", cmd.Process.Pid, err)
		}
	}
	if _, err := os.Stat(forgedCgroup); err != nil {
		t.Errorf("a cgroup whose name contains the ID was removed: %v", err)
	}
}

// TestKillCgroupOfNoCgroup: a container whose cgroup is not there (the
// runtime removed it) costs nothing and is no error.
func TestKillCgroupOfNoCgroup(t *testing.T) {
	h := cgroupMount{point: t.TempDir(), v2: true}
	if err := killCgroup([]cgroupMount{h}, "/pod/gone", time.Second); err != nil {
		t.Fatalf("killCgroup of a cgroup that is not there: %v", err)
	}
}

// TestContainerCgroup: only a cgroup named after the container, as
// CgroupsPath names it, is the container's to empty; a hierarchy's root,
// where every process of the host is, is refused.
func TestContainerCgroup(t *testing.T) {
	id := strings.Repeat("cd", 32)
	for _, tc := range []struct {
		path   string
		driver CgroupDriver
		want   string
		err    error
	}{
		{"/kubepods/pod1/" + id, CgroupfsDriver, "/kubepods/pod1/" + id, nil},
		{"kubepods-pod1.slice:minicri:" + id, SystemdDriver, "/kubepods.slice/kubepods-pod1.slice/minicri-" + id + ".scope", nil},
		// Moved by an NRI plugin into a shared cgroup: not emptied.
		{"/kubepods/pod1", CgroupfsDriver, "", nil},
		{"/kubepods/pod1/x-" + id, CgroupfsDriver, "", nil},
		{"kubepods.slice:other:" + id, SystemdDriver, "", nil},
		{"/", CgroupfsDriver, "", ErrInvalid},
		{"/a/..", CgroupfsDriver, "", ErrInvalid},
	} {
		got, err := containerCgroup(id, tc.path, tc.driver)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("containerCgroup(%q, %s) = %q, %v; want %q, %v", tc.path, tc.driver, got, err, tc.want, tc.err)
		}
	}
	if err := removeStranded(context.Background(), id, "", CgroupfsDriver); err != nil {
		t.Errorf("removeStranded of no cgroup = %v, want nil", err)
	}
}

// TestParseCgroupMounts: only the hierarchies mounted at their roots under
// the cgroup root count, v1 with their controllers.
func TestParseCgroupMounts(t *testing.T) {
	const mountinfo = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 31 0:29 /sub /mnt/cpu rw,relatime - cgroup cgroup rw,cpu,cpuacct
51 31 0:38 / /tmp/attacker/cgroup rw,relatime - cgroup2 cgroup2 rw
`
	path := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(path, []byte(mountinfo), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := parseCgroupMounts(f, "/sys/fs/cgroup")
	var points []string
	for _, m := range got {
		points = append(points, m.point)
	}
	if want := "/sys/fs/cgroup/cpu,cpuacct /sys/fs/cgroup/systemd /sys/fs/cgroup/unified"; strings.Join(points, " ") != want {
		t.Fatalf("hierarchies = %v, want %s", points, want)
	}
	if !got[0].serves("cpu,cpuacct") || got[0].serves("memory") || !got[1].serves("name=systemd") || !got[2].serves("") || got[0].serves("") {
		t.Errorf("serves: %+v", got)
	}
}

// TestDeleteOfStoppedContainerLeavesNothing: the runtime's delete of a
// container whose init exited removes its state and its cgroup in every
// hierarchy.
func TestDeleteOfStoppedContainerLeavesNothing(t *testing.T) {
	rt := testRuntime(t, "runc")
	if currentHost().cgroup2 {
		t.Skip("checks the v1 hierarchies of this host")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := baseSpec(t, "/bin/true")
	tc := createContainer(t, rt, c)
	if err := rt.Start(ctx, c.ID); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if code, err := tc.wait(5 * time.Second); err != nil || code != 0 {
		t.Fatalf("exit = %d, %v; want 0", code, err)
	}
	cgroupsPath, err := CgroupsPath(c.CgroupParent, c.ID, CgroupfsDriver)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Delete(ctx, c.ID, true, cgroupsPath); err != nil {
		t.Fatalf("Delete of a stopped container: %v", err)
	}
	if _, err := os.Stat(filepath.Join(rt.Root, c.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("runc's state after Delete: %v, want it gone", err)
	}
	for _, h := range cgroupHierarchies() {
		if _, err := os.Stat(filepath.Join(h.point, cgroupsPath)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the container's cgroup in %s after Delete: %v, want it gone", h.point, err)
		}
	}
}

// TestCgroupEmptied: a container's own cgroup with a process in it is not
// emptied; with none, or gone, it is; a cgroup not named after the
// container, or none named, says nothing of the container.
func TestCgroupEmptied(t *testing.T) {
	h := testHierarchy(t)
	base := "minicri-test-emptied-" + strconv.Itoa(os.Getpid())
	id := strings.Repeat("cd", 32)
	cgroupsPath := "/" + base + "/pod/" + id
	dir := makeCgroup(t, h, cgroupsPath)
	other := makeCgroup(t, h, "/"+base+"/pod/shared")
	r := &Runtime{}

	cmd := startIn(t, dir)
	if r.CgroupEmptied(id, cgroupsPath) {
		t.Errorf("cgroup with process %d in it reported emptied", cmd.Process.Pid)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !r.CgroupEmptied(id, cgroupsPath) {
		t.Error("cgroup with no process left not reported emptied")
	}
	if err := unix.Rmdir(dir); err != nil {
		t.Fatal(err)
	}
	if !r.CgroupEmptied(id, cgroupsPath) {
		t.Error("cgroup that is gone not reported emptied")
	}
	// Empty, but not the container's own: no answer for the container.
	if r.CgroupEmptied(id, "/"+base+"/pod/"+filepath.Base(other)) {
		t.Error("a cgroup not named after the container reported emptied")
	}
	if r.CgroupEmptied(id, "") {
		t.Error("no cgroups path reported emptied")
	}
}
