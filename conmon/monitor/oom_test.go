package monitor

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Under the systemd driver the scope, and its memory.events, are gone by
// the time the init is reaped: the count the monitor read while the file
// was there (at the kernel's EPOLLPRI) decides. Before, killed() re-read
// the removed file, found no count, and an OOM kill was reported as Error
// (the Debian 12 guest, cgroup v2).
func TestOOMKillCountedBeforeTheCgroupGoes(t *testing.T) {
	events := filepath.Join(t.TempDir(), "memory.events")
	write := func(kills int) {
		t.Helper()
		if err := os.WriteFile(events, []byte("low 0\nhigh 0\nmax 3\noom 1\noom_kill "+strconv.Itoa(kills)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(2)
	o := oomCounter{path: events, fd: -1}
	o.start, o.seen = o.count(), o.count()
	o.open()
	if o.fd < 0 {
		t.Fatal("memory.events not held open")
	}
	write(3) // the kernel counts a kill and wakes the monitor
	if !o.refresh() {
		t.Fatal("refresh of a file that is there failed")
	}
	o.close() // the scope goes: the held file reads ENODEV from now on
	if err := os.Remove(events); err != nil {
		t.Fatal(err)
	}
	if o.refresh() {
		t.Error("refresh without a file said it read one")
	}
	if !o.killed() {
		t.Errorf("killed() = false after a count of 3 was seen (start 2), the cgroup gone")
	}
	// And without a kill seen, a removed cgroup is no OOM kill.
	quiet := oomCounter{path: events, start: 2, seen: 2, fd: -1}
	if quiet.killed() {
		t.Error("killed() = true with no kill seen and the cgroup gone")
	}
}

// A held file whose cgroup went reads an error: refresh says so, and the
// monitor takes it out of the epoll set (a removed kernfs file polls
// ready for ever).
func TestOOMRefreshOfAGoneFile(t *testing.T) {
	fd, err := unix.Open(t.TempDir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	o := oomCounter{fd: fd, start: 0}
	if o.refresh() {
		t.Error("refresh of an unreadable descriptor said it read")
	}
	o.close()
	if o.fd != -1 {
		t.Errorf("fd = %d after close", o.fd)
	}
}

// On a cgroup v2 host with the memory controller (the guest; not this
// host's hybrid tree): an OOM kill in a cgroup that is removed right after
// the victim is reaped, as systemd removes a scope, is still counted,
// because the kernel's EPOLLPRI on memory.events came first.
func TestOOMKillInARemovedV2Cgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	var st unix.Statfs_t
	ctrls, _ := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"))
	if unix.Statfs(cgroupRoot, &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC || !strings.Contains(string(ctrls), "memory") {
		t.Skip("needs cgroup v2 with the memory controller at " + cgroupRoot)
	}
	cg := filepath.Join(cgroupRoot, "minicri-oom-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(cg) })
	for file, v := range map[string]string{"memory.max": "16M", "memory.swap.max": "0"} {
		_ = os.WriteFile(filepath.Join(cg, file), []byte(v), 0o644)
	}
	cmd := exec.Command("sh", "-c", "read x; exec tail /dev/zero") // tail holds all of it
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal(err)
	}
	o := newOOMCounter(cmd.Process.Pid)
	o.open()
	if o.fd < 0 {
		t.Fatalf("memory.events of %s not held (%s)", cg, o.path)
	}
	epfd, _ := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	defer unix.Close(epfd)
	_ = unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, o.fd, &unix.EpollEvent{Events: unix.EPOLLPRI, Fd: int32(o.fd)})
	stdin.Close()
	deadline := time.Now().Add(60 * time.Second)
	for o.seen == o.start && time.Now().Before(deadline) {
		evs := make([]unix.EpollEvent, 1)
		if n, _ := unix.EpollWait(epfd, evs, 1000); n > 0 && !o.refresh() {
			break
		}
	}
	_ = cmd.Wait()
	if err := os.Remove(cg); err != nil { // as systemd removes the empty scope
		t.Fatal(err)
	}
	if o.refresh() {
		t.Error("memory.events of a removed cgroup still reads")
	}
	o.close()
	if !o.killed() {
		t.Errorf("OOM kill not counted (start %d, seen %d)", o.start, o.seen)
	}
}
