//go:build e2e && guest

package e2e

// The guest stage (make guest-test, docs/development.md): minicri on a
// production-shaped node, a Debian VM with systemd as PID 1, cgroup v2
// only, AppArmor on and the release's stock kernel (Debian 12's 6.1 by
// default; GUEST_RELEASE=trixie 6.12, bullseye 5.10), built by
// hack/build-guest.sh and booted by qemu (KVM where the CPU can run a stock
// kernel, TCG elsewhere). One guest serves the whole test binary: it boots
// at the first test that asks for it (bootedGuest) and is shut down after
// the last. minicri is installed in it as an operator would (make install,
// its config file untouched, the unit from contrib/systemd) and runs as a
// systemd service; the tests talk to it with the kubelet's CRI client over a
// socket ssh forwards to the host, and look at the guest over ssh.
//
// Tests that only make pods of their own call t.Parallel(): under TCG most
// of a test is waiting, and the stage has a budget. A test that runs the
// kubelet (which removes every pod it does not know), restarts minicri or
// otherwise changes the node for everyone stays serial: Go runs the serial
// tests first, then the parallel ones together.
//
// Run one test: MINICRI_GUEST_DIR=$(hack/build-guest.sh) \
//   MINICRI_KUBELET=$(hack/build-kubelet.sh --path) \
//   go test -tags e2e,guest -count=1 -timeout 20m -run 'TestGuest/Lifecycle' ./test/e2e/

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/minicri/minicri/test/testimage"
)

// guestDirEnv names hack/build-guest.sh's output dir (kernel, initrd, disk
// image, ssh key). Unset, the tests ask the script for the path and fail,
// saying how to build it, when nothing is there.
const guestDirEnv = "MINICRI_GUEST_DIR"

// guestSlowEnv overrides the factor every wait in the guest is scaled by
// (guest.scale): 1 with KVM, guestTCGSlowness under TCG.
const guestSlowEnv = "MINICRI_GUEST_SLOW"

// guestTCGSlowness is how much longer than on the host a wait may take in a
// TCG guest: TCG runs 20-30x slower for CPU-bound work, but most of the
// tests' waits are on processes starting, where it measured 5-15x.
const guestTCGSlowness = 8

// guestBootWait is how long (scaled) a boot may take until ssh answers:
// the releases' boots differ, and the guest stage boots them side by side.
const guestBootWait = 90 * time.Second

// guestBusyboxRef is the test image every guest has, imported at boot.
const guestBusyboxRef = "docker.io/minicri-e2e/busybox:guest"

// guestSocket is where minicri listens in the guest: its default.
const guestSocket = "/run/minicri/minicri.sock"

// Guest is the booted VM. Its methods are safe for concurrent use.
type Guest struct {
	Dir           string // host temp dir: disk overlay, serial log, ssh control socket, share
	Share         string // host dir the guest mounts at /mnt/host (9p)
	SSHPort       int    // 127.0.0.1:SSHPort forwards to the guest's sshd
	KVM           bool   // false: TCG
	KernelRelease string // uname -r in the guest
	BootTime      time.Duration

	key     string // ssh private key
	control string // ssh ControlPath of the master connection
	scale   time.Duration
	qemu    *exec.Cmd
	exited  chan struct{}
	master  *exec.Cmd

	critestOnce sync.Once // critest's files written (Guest.critest)
}

var (
	guestOnce sync.Once
	theGuest  *Guest
	guestErr  error
)

// bootedGuest returns the suite's guest, booting it and installing minicri
// at the first call; the suite shuts it down at its end (suiteEnd). A guest
// that failed to boot fails every test that asks for it, with the reason.
func bootedGuest(t *testing.T) *Guest {
	t.Helper()
	guestOnce.Do(func() {
		// Stays the answer if the boot ends this test (t.Fatal) midway.
		guestErr = errors.New("the guest failed to boot in an earlier test")
		theGuest, guestErr = bootGuest(t)
		if theGuest != nil {
			suiteEnd = append(suiteEnd, theGuest.shutdown)
		}
		if guestErr == nil {
			guestErr = theGuest.install()
		}
	})
	if guestErr != nil {
		t.Fatalf("guest: %v", guestErr)
	}
	return theGuest
}

// Timeout scales d, a wait that fits the host, to the guest's speed.
func (g *Guest) Timeout(d time.Duration) time.Duration { return d * g.scale }

// guestArtifacts finds the guest's build: $MINICRI_GUEST_DIR or what
// hack/build-guest.sh --path names.
func guestArtifacts() (string, error) {
	dir := os.Getenv(guestDirEnv)
	if dir == "" {
		out, err := exec.Command("../../hack/build-guest.sh", "--path").Output()
		if err != nil {
			return "", fmt.Errorf("hack/build-guest.sh --path: %v", err)
		}
		dir = strings.TrimSpace(string(out))
	}
	for _, f := range []string{"vmlinuz", "initrd.img", "rootfs.img", "id_ed25519"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", fmt.Errorf("no guest image in %s (%v): build it with hack/build-guest.sh (make guest-test does) and set %s", dir, err, guestDirEnv)
		}
	}
	return dir, nil
}

// canKVM says whether qemu can run a stock kernel with KVM here: /dev/kvm
// alone is not enough, a nested hypervisor without vmx/svm (such as PVM)
// opens it but cannot run a stock kernel at any useful speed.
func canKVM() bool {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return false
	}
	cpuinfo, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(cpuinfo), "\n") {
		if strings.HasPrefix(line, "flags") {
			for _, f := range strings.Fields(line) {
				if f == "vmx" || f == "svm" {
					return true
				}
			}
			return false
		}
	}
	return false
}

// bootGuest boots the guest on a throwaway copy-on-write overlay of the
// cached disk image, and waits until ssh answers.
func bootGuest(t *testing.T) (*Guest, error) {
	art, err := guestArtifacts()
	if err != nil {
		return nil, err
	}
	for _, tool := range []string{"qemu-system-x86_64", "qemu-img", "ssh"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s is missing: run hack/install-deps.sh guest", tool)
		}
	}
	dir, err := os.MkdirTemp("", tmpPrefix+"guest-")
	if err != nil {
		return nil, err
	}
	g := &Guest{Dir: dir, Share: filepath.Join(dir, "share"), KVM: canKVM(), exited: make(chan struct{}), scale: guestTCGSlowness}
	g.control = filepath.Join(dir, "ssh.ctl")
	if g.KVM {
		g.scale = 1
	}
	if s := os.Getenv(guestSlowEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return g, fmt.Errorf("%s=%q: want a whole factor >= 1", guestSlowEnv, s)
		}
		g.scale = time.Duration(n)
	}
	// ssh refuses a key others can read; the cached one is root's 0600
	// already, a copy keeps the test independent of the cache's modes.
	key, err := os.ReadFile(filepath.Join(art, "id_ed25519"))
	if err != nil {
		return g, err
	}
	g.key = filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(g.key, key, 0o600); err != nil {
		return g, err
	}
	if err := os.MkdirAll(g.Share, 0o755); err != nil {
		return g, err
	}
	if err := g.fillShare(t); err != nil {
		return g, err
	}
	// Under TCG a saved booted guest (guest_snapshot_test.go) instead of
	// a boot, when there is one or one can be made.
	var saved string
	if !g.KVM && os.Getenv(guestSnapshotEnv) == "1" {
		if saved, err = savedGuest(art, g.key); err != nil {
			fmt.Fprintf(os.Stderr, "guest: booting, no saved guest: %v\n", err)
		}
	}
	disk := filepath.Join(dir, "disk.qcow2")
	overlay := func() error {
		base, format := filepath.Join(art, "rootfs.img"), "raw"
		if saved != "" {
			base, format = filepath.Join(saved, "disk.qcow2"), "qcow2"
		}
		os.Remove(disk)
		if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", format, "-b", base, disk).CombinedOutput(); err != nil {
			return fmt.Errorf("qemu-img create: %v: %s", err, out)
		}
		return nil
	}
	if err := overlay(); err != nil {
		return g, err
	}

	start := time.Now()
	// The port is picked free, then bound by qemu: another process may take
	// it in between, which qemu reports; try again then.
	for attempt := 0; attempt < 3; attempt++ {
		g.SSHPort = freePort()
		args := guestQEMUArgs(art, g.KVM, guestRun{
			Disk: disk, Share: g.Share, Serial: filepath.Join(dir, "serial.log"), SSHPort: strconv.Itoa(g.SSHPort),
		})
		if saved != "" {
			args = append(args, restoreArgs(saved)...)
		}
		g.qemu = exec.Command("qemu-system-x86_64", args...)
		var stderr syncBuffer
		g.qemu.Stdout, g.qemu.Stderr = &stderr, &stderr
		// A test binary killed (its -timeout) takes its VM with it.
		g.qemu.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := g.qemu.Start(); err != nil {
			return g, fmt.Errorf("start qemu: %v", err)
		}
		g.exited = make(chan struct{})
		exited := g.exited
		go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(exited) }(g.qemu)
		err := g.waitSSH(g.Timeout(guestBootWait))
		if err == nil {
			break
		}
		select {
		case <-g.exited:
			if strings.Contains(stderr.String(), "host forwarding") && attempt < 2 {
				continue
			}
			// A saved guest qemu cannot restore: boot instead.
			if saved != "" && attempt < 2 {
				fmt.Fprintf(os.Stderr, "guest: the saved guest in %s did not restore, booting: %s\n", saved, strings.TrimSpace(stderr.String()))
				saved = ""
				if err := overlay(); err != nil {
					return g, err
				}
				continue
			}
			return g, fmt.Errorf("qemu exited: %v\n%s\n--- serial console (tail) ---\n%s", g.qemu.ProcessState, stderr.String(), g.serialTail())
		default:
		}
		return g, fmt.Errorf("%v\n--- serial console (tail) ---\n%s", err, g.serialTail())
	}
	how := "ssh"
	if saved != "" {
		if err := g.afterRestore(); err != nil {
			return g, fmt.Errorf("after the restore: %v", err)
		}
		how = "restored, ssh"
	}
	g.BootTime = time.Since(start)
	out, err := g.run("uname -r")
	if err != nil {
		return g, err
	}
	g.KernelRelease = strings.TrimSpace(out)
	accelName := "TCG"
	if g.KVM {
		accelName = "KVM"
	}
	analyze, _ := g.run("systemd-analyze 2>&1 | head -1")
	fmt.Fprintf(os.Stderr, "guest: kernel %s under %s, %s after %.1f s (%s)\n", g.KernelRelease, accelName, how, g.BootTime.Seconds(), strings.TrimSpace(analyze))
	return g, nil
}

// guestRun is what each boot of the guest has of its own: the rest of its
// qemu command line is the same for every boot of one guest image.
type guestRun struct {
	Disk    string // the qcow2 overlay the guest writes to
	Share   string // the host dir the guest mounts at /mnt/host (9p)
	Serial  string // the file the serial console goes to
	SSHPort string // 127.0.0.1's port forwarded to the guest's sshd
}

// guestQEMUArgs is qemu's command line for the guest image in art.
func guestQEMUArgs(art string, kvm bool, run guestRun) []string {
	accel := []string{"-accel", "tcg,thread=multi,tb-size=256", "-cpu", "max"}
	if kvm {
		accel = []string{"-accel", "kvm", "-cpu", "host"}
	}
	return append(accel,
		"-name", "minicri-guest", "-machine", "q35", "-smp", "2", "-m", "2560",
		"-nodefaults", "-no-user-config", "-display", "none",
		"-kernel", filepath.Join(art, "vmlinuz"), "-initrd", filepath.Join(art, "initrd.img"),
		// No getty on the serial console: the tests log in by ssh, and
		// Debian 13's systemd waits 90 s for the console's device
		// before it gives the getty up.
		"-append", "root=/dev/vda rw console=ttyS0 quiet systemd.unified_cgroup_hierarchy=1 systemd.mask=serial-getty@ttyS0.service panic=-1",
		"-no-reboot",
		"-drive", "file="+run.Disk+",if=virtio,format=qcow2,cache=unsafe,discard=unmap",
		"-netdev", "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:"+run.SSHPort+"-:22",
		"-device", "virtio-net-pci,netdev=n0",
		"-virtfs", "local,path="+run.Share+",mount_tag=host,security_model=passthrough,id=host",
		"-device", "virtio-rng-pci",
		"-serial", "file:"+run.Serial)
}

// freePort is a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitSSH starts the ssh master connection every later command shares (one
// handshake: each costs about a second under TCG), retrying until sshd
// answers or the timeout passes.
func (g *Guest) waitSSH(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-g.exited:
			return fmt.Errorf("qemu exited")
		default:
		}
		master := exec.Command("ssh", append(g.sshOptions(), "-M", "-N", "-o", "ConnectTimeout=10", "root@127.0.0.1")...)
		var stderr syncBuffer
		master.Stderr = &stderr
		master.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := master.Start(); err != nil {
			return err
		}
		done := make(chan struct{})
		go func() { _ = master.Wait(); close(done) }()
		// Up once the control socket answers; the master exits when it cannot connect.
		for {
			if exec.Command("ssh", append(g.sshOptions(), "-O", "check", "root@127.0.0.1")...).Run() == nil {
				g.master = master
				return nil
			}
			select {
			case <-done:
				last = stderr.String()
			case <-time.After(500 * time.Millisecond):
				if time.Now().Before(deadline) {
					continue
				}
				_ = master.Process.Kill()
				<-done
				last = "ssh master did not come up: " + stderr.String()
			}
			break
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("no ssh to the guest on 127.0.0.1:%d after %s: %s", g.SSHPort, timeout, strings.TrimSpace(last))
}

func (g *Guest) sshOptions() []string {
	return []string{"-i", g.key, "-p", strconv.Itoa(g.SSHPort),
		"-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "ControlPath=" + g.control, "-o", "ControlMaster=no",
		"-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=6"}
}

// Command is an ssh command that runs script in the guest (as root, by
// bash -c there); the caller sets its stdio and runs it.
func (g *Guest) Command(ctx context.Context, script string) *exec.Cmd {
	return exec.CommandContext(ctx, "ssh", append(g.sshOptions(), "root@127.0.0.1", "--", "bash", "-c", shellQuote(script))...)
}

// shellQuote quotes s for a POSIX shell: ssh hands the remote shell one string.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// run runs script in the guest within a minute (scaled) and returns its
// combined output; a non-zero exit is an error carrying that output.
func (g *Guest) run(script string) (string, error) {
	return g.runWithin(script, g.Timeout(time.Minute))
}

// runWithin is run with another bound, for a script known to take long.
func (g *Guest) runWithin(script string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out bytes.Buffer
	cmd := g.Command(ctx, script)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		return out.String(), fmt.Errorf("guest: %q did not finish in %s: %s", script, timeout, out.String())
	}
	if err != nil {
		return out.String(), fmt.Errorf("guest: %q: %w: %s", script, err, out.String())
	}
	return out.String(), nil
}

// Run runs script in the guest (bash, as root) and returns its combined
// output, failing the test when it exits non-zero.
func (g *Guest) Run(t testing.TB, script string) string {
	t.Helper()
	out, err := g.run(script)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// RunErr runs script in the guest and returns its output and exit code,
// for a test that expects a failure.
func (g *Guest) RunErr(t testing.TB, script string) (string, int) {
	t.Helper()
	return g.RunErrWithin(t, script, g.Timeout(time.Minute))
}

// RunErrWithin is RunErr with another bound, for a script known to take
// long.
func (g *Guest) RunErrWithin(t testing.TB, script string, timeout time.Duration) (string, int) {
	t.Helper()
	out, err := g.runWithin(script, timeout)
	if err == nil {
		return out, 0
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return out, exitErr.ExitCode()
	}
	t.Fatal(err)
	return "", -1
}

// CopyIn puts the host file src at dst in the guest (mode kept), through
// the share.
func (g *Guest) CopyIn(t testing.TB, src, dst string) {
	t.Helper()
	tmp, err := os.MkdirTemp(g.Share, "copy-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	name := filepath.Join(tmp, filepath.Base(src))
	if out, err := exec.Command("cp", "-a", src, name).CombinedOutput(); err != nil {
		t.Fatalf("cp %s: %v: %s", src, err, out)
	}
	g.Run(t, fmt.Sprintf("cp -a %s %s", shellQuote(g.guestPath(name)), shellQuote(dst)))
}

// WriteFile writes data to path in the guest.
func (g *Guest) WriteFile(t testing.TB, path string, data []byte, mode os.FileMode) {
	t.Helper()
	tmp, err := os.CreateTemp(g.Share, "write-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		t.Fatal(err)
	}
	tmp.Close()
	g.Run(t, fmt.Sprintf("install -D -m %o %s %s", mode, shellQuote(g.guestPath(tmp.Name())), shellQuote(path)))
}

// ReadFile returns the contents of path in the guest.
func (g *Guest) ReadFile(t testing.TB, path string) string {
	t.Helper()
	return g.Run(t, "cat "+shellQuote(path))
}

// guestPath is where the guest sees a file of the share.
func (g *Guest) guestPath(hostPath string) string {
	rel, err := filepath.Rel(g.Share, hostPath)
	if err != nil || strings.HasPrefix(rel, "..") {
		panic(fmt.Sprintf("%s is not in the share %s", hostPath, g.Share))
	}
	return filepath.Join("/mnt/host", rel)
}

// ForwardSocket makes guestPath, a unix socket in the guest, reachable at
// a new socket in the host's temp dir (through the ssh master), until the
// test ends; it returns the host path.
func (g *Guest) ForwardSocket(t testing.TB, guestPath string) string {
	t.Helper()
	local := filepath.Join(g.Dir, "fwd-"+randomHex(4)+".sock")
	spec := local + ":" + guestPath
	if out, err := exec.Command("ssh", append(g.sshOptions(), "-O", "forward", "-L", spec, "root@127.0.0.1")...).CombinedOutput(); err != nil {
		t.Fatalf("ssh forward %s: %v: %s", spec, err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command("ssh", append(g.sshOptions(), "-O", "cancel", "-L", spec, "root@127.0.0.1")...).Run()
		_ = os.Remove(local)
	})
	return local
}

// CRI connects the kubelet's CRI client to the guest's minicri through a
// forwarded socket. The Daemon it returns has only Runtime, Images,
// Endpoint, Socket and Dir (a host temp dir) set: it is not a process of
// the host, so none of the methods that look at the host's processes or
// files apply; createContainer, startContainer, status and waitExited do.
func (g *Guest) CRI(t *testing.T) *Daemon {
	t.Helper()
	sock := g.ForwardSocket(t, guestSocket)
	d := &Daemon{Dir: t.TempDir(), Socket: sock, Endpoint: "unix://" + sock, t: t}
	ctx := context.Background()
	rt, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(d.Endpoint).WithConnectionTimeout(g.Timeout(10 * time.Second)).
		WithTracerProvider(nil).WithUseStreaming(false).Build(ctx)
	if err != nil {
		t.Fatalf("connect to the guest's runtime service: %v", err)
	}
	img, err := remote.NewRemoteImageServiceBuilder().WithEndpoint(d.Endpoint).WithConnectionTimeout(g.Timeout(10 * time.Second)).
		WithTracerProvider(nil).Build(ctx)
	if err != nil {
		t.Fatalf("connect to the guest's image service: %v", err)
	}
	d.Runtime, d.Images = rt, img
	return d
}

// Journal is the tail (n lines) of a unit's journal in the guest, for
// failure messages.
func (g *Guest) Journal(unit string, n int) string {
	out, _ := g.run(fmt.Sprintf("journalctl --no-pager -o short-precise -n %d -u %s", n, shellQuote(unit)))
	return out
}

// LogJournalOnFailure shows minicri's journal when the test fails.
func (g *Guest) LogJournalOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- minicri.service journal (tail) ---\n%s", g.Journal("minicri.service", 80))
		}
	})
}

func (g *Guest) serialTail() string {
	data, _ := os.ReadFile(filepath.Join(g.Dir, "serial.log"))
	return tail(string(data), 40)
}

// fillShare puts what the guest installs into the share: minicri as `make
// install` lays it out (install/), the runc make deps built, the kubelet,
// contrib's CNI network, and the test images as docker save tars (images/).
func (g *Guest) fillShare(t *testing.T) error {
	root, err := filepath.Abs("../..")
	if err != nil {
		return err
	}
	install := filepath.Join(g.Share, "install")
	// make install builds bin/ first: the guest stage's side-by-side runs
	// of this binary take turns, so that none copies a binary another's
	// build is writing.
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(root, "bin", ".guest-install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %v", lock.Name(), err)
	}
	cmd := exec.Command("make", "-s", "-C", root, "install", "DESTDIR="+install)
	out, err := cmd.CombinedOutput()
	_ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if err != nil {
		return fmt.Errorf("make install DESTDIR=%s: %v\n%s", install, err, out)
	}
	runc, err := exec.Command(filepath.Join(root, "hack/build-runc.sh"), "--path").Output()
	if err != nil {
		return fmt.Errorf("hack/build-runc.sh --path: %v", err)
	}
	copies := map[string]string{
		strings.TrimSpace(string(runc)):                               "runc",
		filepath.Join(root, "contrib/cni/10-minicri-bridge.conflist"): "10-minicri-bridge.conflist",
	}
	if k := os.Getenv(kubeletEnv); k != "" {
		copies[k] = "kubelet"
	}
	if c := os.Getenv(critestEnv); c != "" {
		copies[c] = "critest"
	}
	for src, name := range copies {
		if _, err := os.Stat(src); err != nil {
			return fmt.Errorf("%v (make deps builds runc, make kubelet the kubelet)", err)
		}
		if out, err := exec.Command("cp", src, filepath.Join(g.Share, name)).CombinedOutput(); err != nil {
			return fmt.Errorf("cp %s: %v: %s", src, err, out)
		}
	}
	images := filepath.Join(g.Share, "images")
	if err := os.MkdirAll(images, 0o755); err != nil {
		return err
	}
	testimage.WriteDockerSave(t, filepath.Join(images, "busybox.tar"), map[string]v1.Image{guestBusyboxRef: testimage.Busybox(t)})
	return nil
}

// guestInstall installs and starts minicri in the guest as an operator
// would, step by step: make install's files, runc v1.5.2 where minicri's
// runc-current handler looks for it (and as the node's runc), make
// install's config as it is (the daemon detects the systemd driver),
// contrib's CNI network, the test image imported, then the unit enabled
// and started.
var guestInstall = []struct{ name, script string }{
	{"files", `set -e
cp -a /mnt/host/install/. /
install -D -m 0755 /mnt/host/runc /usr/local/lib/minicri/runc-v1.5.2/runc
install -D -m 0755 /mnt/host/runc /usr/local/sbin/runc
if [ -e /mnt/host/kubelet ]; then install -D -m 0755 /mnt/host/kubelet /usr/local/bin/kubelet; fi
install -D -m 0644 /mnt/host/10-minicri-bridge.conflist /etc/cni/net.d/10-minicri-bridge.conflist`},
	{"image import", "minicri image import /mnt/host/images/busybox.tar"},
	{"service start", "systemctl daemon-reload && systemctl enable --now minicri.service && systemctl is-active minicri.service"},
}

func (g *Guest) install() error {
	var took []string
	for _, step := range guestInstall {
		start := time.Now()
		if _, err := g.run(step.script); err != nil {
			return fmt.Errorf("installing minicri (%s): %v\n--- journal ---\n%s", step.name, err, g.Journal("minicri.service", 60))
		}
		took = append(took, fmt.Sprintf("%s %.1f s", step.name, time.Since(start).Seconds()))
	}
	fmt.Fprintf(os.Stderr, "guest: minicri installed and started: %s\n", strings.Join(took, ", "))
	return nil
}

// shutdown powers the guest off (systemctl poweroff), kills qemu by its
// pid if it is still running after a while, and removes the guest's dir.
func (g *Guest) shutdown() {
	if g.qemu != nil && g.qemu.Process != nil {
		select {
		case <-g.exited:
			// It went before the tests were done (a guest panic or
			// reboot ends qemu: -no-reboot): its console says why.
			fmt.Fprintf(os.Stderr, "guest: qemu exited before the end of the tests (%v)\n--- serial console (tail) ---\n%s\n", g.qemu.ProcessState, g.serialTail())
		default:
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_ = g.Command(ctx, "systemctl --no-block poweroff").Run()
			cancel()
			select {
			case <-g.exited:
			case <-time.After(g.Timeout(5 * time.Second)):
				_ = g.qemu.Process.Kill()
				<-g.exited
			}
		}
	}
	if g.master != nil {
		_ = g.master.Process.Kill()
		_ = g.master.Wait()
	}
	_ = os.RemoveAll(g.Dir)
}
