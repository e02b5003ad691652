//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// buildStaticC builds testdata/NAME/NAME.c, static, into a temp dir of its
// own that a container can bind-mount and a pod's user namespace can
// reach, and returns that dir.
func buildStaticC(t *testing.T, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", tmpPrefix+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join("testdata", name, name+".c")
	cc := exec.Command("cc", "-static", "-O2", "-Wall", "-Wextra", "-o", filepath.Join(dir, name), src)
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", src, err, out)
	}
	return dir
}

// daemonCPU is the CPU time the daemon process has used, its reaped
// children (runc, helpers) included.
func (d *Daemon) daemonCPU() time.Duration { return treeCPU(d.cmd.Process.Pid) }

// fdHogProcs processes, each holding the ~20,000 descriptors the test's
// RLIMIT_NOFILE allows: some 2 million, which the search of every process's
// /proc/PID/fd took half a minute of the daemon's CPU to read, at each
// restart and each failed create's rollback.
const fdHogProcs = 100

// TestPodHoldingManyFdsDoesNotSlowRestartOrRollback: a pod whose container
// holds some 2 million descriptors costs the daemon nothing at a restart or
// when a failed create is rolled back (docs/security.md, "Stranded
// inits"). The work is measured, not the wall time: the daemon's CPU time
// from its restart through a restart's recovery and a failed create's
// rollback stays far below what reading those descriptors' links costs.
func TestPodHoldingManyFdsDoesNotSlowRestartOrRollback(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	hog := buildStaticC(t, "fdhog")
	cfg := d.hostNetworkPod("fds")
	cfg.Linux.SecurityContext.NamespaceOptions.Pid = runtime.NamespaceMode_CONTAINER
	pod := d.runPod(t, cfg)
	ctr := containerConfig("hog", ref, "/hog/fdhog", strconv.Itoa(fdHogProcs))
	ctr.Mounts = []*runtime.Mount{{ContainerPath: "/hog", HostPath: hog, Readonly: true}}
	id := d.startContainer(t, pod, cfg, ctr)
	// The descriptors go before anything that reads every process's (the
	// leak checks), and whether or not the daemon still answers: killing
	// the container's init ends its PID namespace, and the hog's children
	// die with their parent.
	hogPID := d.containerPID(t, id)
	stopHog := func() {
		if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", hogPID)); strings.Contains(string(cmdline), "fdhog") {
			_ = syscall.Kill(hogPID, syscall.SIGKILL)
		}
	}
	t.Cleanup(stopHog)
	logPath := d.status(t, id).GetLogPath()
	held := 0
	waitFor(t, fmt.Sprintf("%d processes holding their descriptors", fdHogProcs), 2*time.Minute, func() bool {
		b, _ := os.ReadFile(logPath)
		held = 0
		lines := 0
		for _, line := range strings.Split(string(b), "\n") {
			if _, rest, ok := strings.Cut(line, " held "); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(rest))
				held += n
				lines++
			}
		}
		return lines == fdHogProcs
	})
	t.Logf("the pod holds %d descriptors", held)

	d.Signal(syscall.SIGTERM)
	d.Wait(30 * time.Second)
	// A process holds the state root's lock as the daemon starts (as a
	// child the last daemon forked can): the wait for it must not search
	// the node's descriptors on every poll. It lets go once the daemon
	// says it waits.
	_, releaseLock := holdStateRootLock(t, d)
	begin := time.Now()
	// Fails the test unless the daemon answers within 20 s.
	d.StartWatching(func(output fmt.Stringer) {
		defer releaseLock()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if strings.Contains(output.String(), "the state root is still locked") {
				return
			}
		}
	})
	restart := time.Since(begin)
	if !strings.Contains(d.Output(), "the state root is still locked") {
		t.Errorf("the daemon never said it waited for the state root's lock:\n%s", d.Output())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	begin = time.Now()
	_, err := d.Runtime.CreateContainer(ctx, pod, containerConfig("bad", ref, "/no/such/binary"), cfg)
	rollback := time.Since(begin)
	if err == nil {
		t.Fatal("CreateContainer of a missing binary succeeded; want it to fail and be rolled back")
	}
	cpu := d.daemonCPU()
	t.Logf("restart answered in %s, the failed create in %s; the daemon's CPU since its start: %s", restart, rollback, cpu)
	// Reading 2 million links costs 10 to 40 s of CPU, twice; the
	// daemon's own start and the create's runc take a fraction of one.
	if limit := 5 * time.Second; cpu > limit {
		t.Errorf("the daemon used %s of CPU for a restart and a failed create with %d descriptors held in a pod, want < %s: its work grows with what pods hold", cpu, held, limit)
	}
	stopHog()
}

// holdStateRootLock has a child process (`sleep 60`) hold d's state root
// lock until release kills it (also at the test's end).
func holdStateRootLock(t *testing.T, d *Daemon) (pid int, release func()) {
	t.Helper()
	lock, err := os.OpenFile(filepath.Join(d.Root, "minicri.lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close() // the holder's copy alone holds the lock
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("the state root's lock is still held: %v", err)
	}
	holder := exec.Command("sleep", "60")
	holder.ExtraFiles = []*os.File{lock}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	}
	t.Cleanup(release)
	return holder.Process.Pid, release
}

// forgedCgroup makes a cgroup named to contain id under the test's cgroup
// parent, in the pids hierarchy (v1) or the v2 tree, and moves pid into it.
// It must outlive everything the daemon does with id; the caller removes
// it once pid is gone.
func (d *Daemon) forgedCgroup(t *testing.T, id string, pid int) string {
	t.Helper()
	root := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(root, "pids", "cgroup.procs")); err == nil {
		root = filepath.Join(root, "pids")
	} else if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		t.Skip("no pids hierarchy and no v2 tree to make a cgroup in")
	}
	dir := filepath.Join(root, d.cgroupParent(), "forged-"+randomHex(4), "x-"+id+".scope")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("move %d into %s: %v", pid, dir, err)
	}
	return dir
}

// TestForgedExecFifoKillsNothing: a process that holds a fifo named like a
// waiting init's (RUNTIME_ROOT/ID/exec.fifo, made in a mount namespace of
// its own) for the ID of a container about to be removed, in a cgroup
// whose name contains that ID, is neither killed nor has its cgroup
// removed: not by the RemovePodSandbox of that container's pod, nor by a
// restart (docs/security.md, "Stranded inits"). The forgers: a container,
// and the host user nobody under unshare -Urm.
func TestForgedExecFifoKillsNothing(t *testing.T) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv")
	}
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	// Removed after the forgers are gone, which the cleanups registered
	// later see to first.
	var cgroups []string
	t.Cleanup(func() {
		for _, dir := range cgroups {
			waitFor(t, "the forgers to leave "+dir, 20*time.Second, func() bool {
				b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
				return err != nil || len(b) == 0
			})
			_ = syscall.Rmdir(dir)
			_ = syscall.Rmdir(filepath.Dir(dir))
		}
	})

	victimCfg := d.hostNetworkPod("victim")
	victimPod := d.runPod(t, victimCfg)
	victim := d.startContainer(t, victimPod, victimCfg, containerConfig("v", ref, "true"))
	d.waitExited(t, victim, 30*time.Second)

	forgerCfg := d.hostNetworkPod("forger")
	forgerPod := d.runPod(t, forgerCfg)
	forge := func(dir string) string {
		return fmt.Sprintf(`mkdir -p %[1]s && mkfifo %[1]s/exec.fifo && exec 3<>%[1]s/exec.fifo && echo forged && exec sleep 3600`, dir)
	}
	// The container forger is told the path once it runs, in a file the
	// test writes into it: the runtime root of the pods' handler, where
	// its own state is, and the victim's ID.
	inside := d.startContainer(t, forgerPod, forgerCfg, containerConfig("f", ref, "sh", "-c",
		`while [ ! -s /forge ]; do sleep 0.1; done; dir=$(cat /forge); `+forge(`"$dir"`)))
	states, _ := filepath.Glob(filepath.Join(d.RunDir, "runtime", "*", inside))
	if len(states) != 1 {
		t.Fatalf("runtime state of the forger container: %v, want one", states)
	}
	fifoDir := filepath.Join(filepath.Dir(states[0]), victim)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, _, err := d.Runtime.ExecSync(ctx, inside, []string{"sh", "-c", "echo " + fifoDir + " > /forge"}, 10*time.Second); err != nil {
		t.Fatalf("tell the container forger its path: %v", err)
	}
	d.waitLogged(t, inside, "forged")
	insidePID := d.containerPID(t, inside)

	// The host forger: nobody, root of its own user and mount namespace,
	// with a tmpfs over /tmp where the daemon's run dir is.
	out := filepath.Join(t.TempDir(), "out")
	outFile, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	mountPoint := "/" + strings.Split(strings.TrimPrefix(d.RunDir, "/"), "/")[0]
	host := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
		"unshare", "-Urm", "sh", "-c", "mount -t tmpfs forged "+mountPoint+" && "+forge(fifoDir))
	host.Stdout, host.Stderr, host.Dir = outFile, outFile, "/"
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	hostExited := make(chan struct{})
	go func() { _ = host.Wait(); close(hostExited) }()
	t.Cleanup(func() { _ = host.Process.Kill(); <-hostExited })
	waitFor(t, "the host forger to hold its fifo", 20*time.Second, func() bool {
		b, _ := os.ReadFile(out)
		return strings.Contains(string(b), "forged")
	})

	cgroups = append(cgroups, d.forgedCgroup(t, victim, insidePID), d.forgedCgroup(t, victim, host.Process.Pid))
	check := func(after string) {
		t.Helper()
		select {
		case <-hostExited:
			b, _ := os.ReadFile(out)
			t.Errorf("after %s: the host forger was killed (%s)", after, strings.TrimSpace(string(b)))
		default:
		}
		if st := d.status(t, inside); st.GetState() != runtime.ContainerState_CONTAINER_RUNNING {
			t.Errorf("after %s: the container forger is %v (exit %d), want running", after, st.GetState(), st.GetExitCode())
		}
		for _, dir := range cgroups {
			if _, err := os.Stat(dir); err != nil {
				t.Errorf("after %s: the cgroup %s, named to contain the ID, was removed: %v", after, dir, err)
			}
		}
	}

	if err := d.Runtime.StopPodSandbox(ctx, victimPod); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if err := d.Runtime.RemovePodSandbox(ctx, victimPod); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	// The old search killed at once; a short wait lets a kill land.
	time.Sleep(500 * time.Millisecond)
	check("RemovePodSandbox of the victim's pod")

	d.Signal(syscall.SIGTERM)
	d.Wait(30 * time.Second)
	d.Start()
	time.Sleep(500 * time.Millisecond)
	check("a restart")
}
