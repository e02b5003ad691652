package conmon_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/minicri/minicri/conmon"
)

// memory is a process's share of memory from /proc/PID/smaps_rollup, in KiB.
type memory struct {
	pss, private, rss int
}

func readMemory(t *testing.T, pid int) memory {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		t.Fatalf("smaps_rollup of %d: %v", pid, err)
	}
	defer f.Close()
	var m memory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.Atoi(fields[1])
		switch fields[0] {
		case "Pss:":
			m.pss = kb
		case "Rss:":
			m.rss = kb
		case "Private_Clean:", "Private_Dirty:":
			m.private += kb
		}
	}
	return m
}

func (m memory) String() string {
	return fmt.Sprintf("PSS %4d KiB  private %4d KiB  RSS %4d KiB", m.pss, m.private, m.rss)
}

// TestMonitorMemory measures idle containers, 3 and 20 of them, under
// monitors of their own, under one shared monitor, and under Debian's C
// conmon when it is installed: the PSS each container costs, side by side.
// It logs the numbers (go test -v -run TestMonitorMemory; make bench shows
// them) and asserts a generous bound, and that sharing saves memory. Each
// kind runs alone (a subtest cleans up before the next): other monitors
// would share pages and flatter the numbers. Not parallel for the same
// reason.
func TestMonitorMemory(t *testing.T) {
	requireRuntime(t)
	for _, n := range []int{3, 20} {
		var own, shared memory
		t.Run(fmt.Sprintf("own-%d", n), func(t *testing.T) {
			pids := startIdleContainers(t, n)
			settle(t, pids)
			own = perContainer(t, pids, n)
			t.Logf("minicri-conmon, a monitor per container, %2d containers: %v per container   goal < 1 MiB (not the default: monitor_share is 8)", n, own)
		})
		t.Run(fmt.Sprintf("shared-%d", n), func(t *testing.T) {
			pids := startSharedContainers(t, n)
			settle(t, pids)
			shared = perContainer(t, pids, n)

			t.Logf("minicri-conmon, one shared monitor,      %2d containers: %v per container   goal <= C conmon", n, shared)
		})
		if own.pss > 4096 || own.private > 4096 {
			t.Errorf("minicri-conmon with %d containers uses %v each, want under 4 MiB", n, own)
		}
		if shared.pss >= own.pss {
			t.Errorf("a shared monitor costs %v per container, a monitor of its own %v: sharing saves nothing", shared, own)
		}
		if _, err := os.Stat("/usr/bin/conmon"); err == nil {
			t.Run(fmt.Sprintf("conmon-%d", n), func(t *testing.T) {
				pids := startIdleConmons(t, n)
				settle(t, pids)
				t.Logf("C conmon 2.1.6,                          %2d containers: %v per container   reference", n, perContainer(t, pids, n))
			})
		}
	}
}

// perContainer is the memory of the processes divided among n containers.
func perContainer(t *testing.T, pids []int, n int) memory {
	var sum memory
	for _, pid := range pids {
		m := readMemory(t, pid)
		sum.pss += m.pss
		sum.private += m.private
		sum.rss += m.rss
	}
	return memory{pss: sum.pss / n, private: sum.private / n, rss: sum.rss / n}
}

// settle waits until the monitors' memory stops changing.
func settle(t *testing.T, pids []int) {
	deadline := time.Now().Add(3 * time.Second)
	prev := -1
	for time.Now().Before(deadline) {
		total := perContainer(t, pids, 1).pss
		if total == prev {
			return
		}
		prev = total
		time.Sleep(200 * time.Millisecond)
	}
}

func startIdleContainers(t *testing.T, n int) []int {
	var pids []int
	for i := 0; i < n; i++ {
		c := newContainer(t, []string{"sleep", "1000"}, nil)
		c.run()
		pids = append(pids, c.created.MonitorPID)
	}
	return pids
}

// startSharedContainers runs n containers in one shared monitor and
// returns its pid.
func startSharedContainers(t *testing.T, n int) []int {
	joinDir := filepath.Join(t.TempDir(), "m")
	if err := os.Mkdir(joinDir, 0o700); err != nil {
		t.Fatal(err)
	}
	first := newContainer(t, []string{"sleep", "1000"}, func(_ *specs.Spec, o *conmon.Options) { o.JoinDir = joinDir })
	first.run()
	for i := 1; i < n; i++ {
		newContainer(t, []string{"sleep", "1000"}, nil).join(joinDir)
	}
	return []int{first.created.MonitorPID}
}

// startIdleConmons runs the same containers under Debian's conmon. It
// double-forks; the test process, a subreaper, adopts it and reaps it.
func startIdleConmons(t *testing.T, n int) []int {
	var pids []int
	for i := 0; i < n; i++ {
		c := newContainer(t, []string{"sleep", "1000"}, nil)
		dir := filepath.Dir(c.opts.ExitFile)
		pidFile := filepath.Join(dir, "conmon.pid")
		containerPIDFile := filepath.Join(dir, "container.pid")
		for _, d := range []string{c.opts.SocketDir, filepath.Join(dir, "exits")} {
			os.MkdirAll(d, 0o700)
		}
		// Registered first: whatever fails below, the container and its
		// conmon go again. conmon exits once its container is deleted.
		t.Cleanup(func() {
			exec.Command("runc", "--root", c.opts.RuntimeRoot, "delete", "--force", c.id).Run()
			b, _ := os.ReadFile(pidFile)
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				waitFor(t, "conmon to exit", 10*time.Second, func() bool { return !running(pid) })
				reapAdopted(pid)
			}
		})
		cmd := exec.Command("/usr/bin/conmon", "--api-version", "1",
			"-c", c.id, "-u", c.id, "-n", c.id, "-r", "/usr/sbin/runc", "-b", c.opts.Bundle,
			"-p", containerPIDFile, "-P", pidFile,
			"-l", "k8s-file:"+c.opts.LogPath, "--exit-dir", filepath.Join(dir, "exits"),
			"--socket-dir-path", c.opts.SocketDir, "--runtime-arg", "--root="+c.opts.RuntimeRoot)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("conmon: %v: %s", err, out)
		}
		// conmon's first process returns before the runtime's create did.
		waitFor(t, "conmon's create", 10*time.Second, func() bool {
			_, err := os.Stat(containerPIDFile)
			return err == nil
		})
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatalf("conmon pid file: %v", err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		c.runc("start", c.id)
		pids = append(pids, pid)
	}
	return pids
}
