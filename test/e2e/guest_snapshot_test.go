//go:build e2e && guest

package e2e

// A booted guest, saved once per guest image and restored at every run
// instead of a boot: under TCG the boot, from qemu's start to sshd, is
// minutes of a busy host's CPU, every run, for the same result.
//
// What makes the restore sound:
//   - qemu restores the machine it saved only into the same machine: the
//     cache entry is keyed by the image, qemu's version and the whole
//     command line but for what each run has of its own (guestRun: ssh
//     port, disk overlay, share, console file), none of which the guest
//     holds any state of at the save. The port is the host's side of the
//     user-mode network; the share is saved unmounted (it mounts on first
//     use, and qemu refuses to save a guest with the share mounted).
//   - The disk is saved with the memory, at the same instant (qemu's
//     migration stops the VM at its end and flushes the disk), and every
//     run writes to an overlay of its own on top of the saved disk, which
//     no run changes.
//   - The guest's wall clock is where it stopped at the save; the restore
//     sets it to the host's before anything runs.
//   - Each restored guest starts from the same memory: the same machine
//     ID, boot ID and kernel random state. The harness runs one guest per
//     test binary and never two restored guests as nodes of one cluster,
//     and it feeds the guest's entropy pool from the host at restore.
//
// MINICRI_GUEST_SNAPSHOT=1 turns it on; KVM guests always boot.

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// guestSnapshotEnv turns the saved guest on ("1").
const guestSnapshotEnv = "MINICRI_GUEST_SNAPSHOT"

// guestSnapshotDir is the cache entry of a saved guest of the image in
// art: in the cache beside the image, keyed by everything qemu must be
// given again for a restore.
func guestSnapshotDir(art string) (string, error) {
	version, err := exec.Command("qemu-system-x86_64", "--version").Output()
	if err != nil {
		return "", fmt.Errorf("qemu --version: %v", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", filepath.Base(art), version)
	for _, a := range guestQEMUArgs(art, false, guestRun{Disk: "DISK", Share: "SHARE", Serial: "SERIAL", SSHPort: "PORT"}) {
		fmt.Fprintf(h, "%s\n", a)
	}
	name := strings.Replace(filepath.Base(art), "guest-", "guest-booted-", 1) + "-" + hex.EncodeToString(h.Sum(nil))[:12]
	return filepath.Join(filepath.Dir(art), name), nil
}

// savedGuest returns the cache entry of the saved guest of art (disk.qcow2
// and state, the migration stream), saving one first when there is none:
// a boot as every run did before, then qemu's migration to a file.
func savedGuest(art, key string) (string, error) {
	dir, err := guestSnapshotDir(art)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	// One save at a time per entry: a second caller waits, then restores.
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "state")); err == nil {
		return dir, nil
	}
	start := time.Now()
	if err := saveGuest(art, key, dir); err != nil {
		os.Remove(filepath.Join(dir, "disk.qcow2"))
		os.Remove(filepath.Join(dir, "state.tmp"))
		return "", err
	}
	fmt.Fprintf(os.Stderr, "guest: saved a booted guest in %s in %.1f s\n", dir, time.Since(start).Seconds())
	return dir, nil
}

// saveGuest boots the guest on dir/disk.qcow2, waits for ssh, and saves it
// stopped to dir/state.
func saveGuest(art, key, dir string) error {
	tmp, err := os.MkdirTemp("", tmpPrefix+"guest-save-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	disk := filepath.Join(dir, "disk.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw",
		"-b", filepath.Join(art, "rootfs.img"), disk).CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img create: %v: %s", err, out)
	}
	g := &Guest{Dir: tmp, Share: filepath.Join(tmp, "share"), key: key, control: filepath.Join(tmp, "ssh.ctl"), scale: guestTCGSlowness, exited: make(chan struct{})}
	if err := os.MkdirAll(g.Share, 0o755); err != nil {
		return err
	}
	g.SSHPort = freePort()
	qmpSock := filepath.Join(tmp, "qmp.sock")
	args := append(guestQEMUArgs(art, false, guestRun{Disk: disk, Share: g.Share, Serial: filepath.Join(tmp, "serial.log"), SSHPort: fmt.Sprint(g.SSHPort)}),
		"-qmp", "unix:"+qmpSock+",server=on,wait=off")
	g.qemu = exec.Command("qemu-system-x86_64", args...)
	var stderr syncBuffer
	g.qemu.Stdout, g.qemu.Stderr = &stderr, &stderr
	g.qemu.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := g.qemu.Start(); err != nil {
		return fmt.Errorf("start qemu: %v", err)
	}
	go func() { _ = g.qemu.Wait(); close(g.exited) }()
	defer func() {
		_ = g.qemu.Process.Kill()
		<-g.exited
	}()
	if err := g.waitSSH(g.Timeout(guestBootWait)); err != nil {
		return fmt.Errorf("boot to save: %v: %s\n--- serial console (tail) ---\n%s", err, stderr.String(), g.serialTail())
	}
	// The share must not be mounted (qemu cannot save a guest that has it
	// mounted, and a run's share is another dir), and what the boot wrote
	// goes to the disk.
	if _, err := g.run("sync; ! grep -q '^host /mnt/host 9p ' /proc/mounts"); err != nil {
		return fmt.Errorf("before the save: %v", err)
	}
	// The harness's ssh connection ends before the save, so that no
	// restored guest holds a session whose other end is gone (waitSSH
	// reaps the master).
	if out, err := exec.Command("ssh", append(g.sshOptions(), "-O", "exit", "root@127.0.0.1")...).CombinedOutput(); err != nil {
		return fmt.Errorf("ssh -O exit: %v: %s", err, out)
	}
	for deadline := time.Now().Add(time.Minute); syscall.Kill(g.master.Process.Pid, 0) == nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			return errors.New("ssh's master connection still there a minute after ssh -O exit")
		}
	}
	state := filepath.Join(dir, "state")
	// Saved running: a restore resumes in the state the guest was saved
	// in. The migration stops the guest itself at its end, flushes the
	// disk and sends the last of the memory, so disk and memory are of
	// one instant.
	if err := qmp(qmpSock, `{"execute":"migrate","arguments":{"uri":"exec:cat >`+state+`.tmp"}}`); err != nil {
		return err
	}
	deadline := time.Now().Add(g.Timeout(time.Minute))
	for {
		var st struct {
			Return struct {
				Status    string `json:"status"`
				ErrorDesc string `json:"error-desc"`
			} `json:"return"`
		}
		out, err := qmpAnswer(qmpSock, `{"execute":"query-migrate"}`)
		if err == nil {
			err = json.Unmarshal(out, &st)
		}
		if err != nil {
			return fmt.Errorf("query-migrate: %v", err)
		}
		if st.Return.Status == "completed" {
			break
		}
		if st.Return.Status == "failed" || time.Now().After(deadline) {
			return fmt.Errorf("save the guest: migration %s %s", st.Return.Status, st.Return.ErrorDesc)
		}
		time.Sleep(200 * time.Millisecond)
	}
	_ = qmp(qmpSock, `{"execute":"quit"}`)
	select {
	case <-g.exited:
	case <-time.After(time.Minute):
		return errors.New("qemu did not quit after the save")
	}
	return os.Rename(state+".tmp", state)
}

// restoreArgs is what qemu is given beyond the guest's command line to
// restore the saved guest in dir instead of booting.
func restoreArgs(dir string) []string {
	return []string{"-incoming", "exec:cat " + filepath.Join(dir, "state")}
}

// afterRestore sets the restored guest's clock to the host's and mixes
// host randomness into its entropy pool: it resumes where it was saved.
func (g *Guest) afterRestore() error {
	seed := make([]byte, 64)
	_, _ = rand.Read(seed)
	now := time.Now()
	_, err := g.run(fmt.Sprintf("date -u -s @%d.%09d >/dev/null && echo %s | base64 -d >/dev/urandom",
		now.Unix(), now.Nanosecond(), base64.StdEncoding.EncodeToString(seed)))
	return err
}

// qmp runs commands on qemu's QMP socket, one after another, each to its
// answer.
func qmp(sock string, commands ...string) error {
	for _, c := range commands {
		if _, err := qmpAnswer(sock, c); err != nil {
			return err
		}
	}
	return nil
}

// qmpAnswer runs one command on a QMP connection of its own and returns
// its answer (events skipped); an error answer is an error.
func qmpAnswer(sock, command string) ([]byte, error) {
	conn, err := net.DialTimeout("unix", sock, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	r := bufio.NewReader(conn)
	if _, err := r.ReadBytes('\n'); err != nil { // the greeting
		return nil, err
	}
	for _, c := range []string{`{"execute":"qmp_capabilities"}`, command} {
		if _, err := conn.Write([]byte(c + "\n")); err != nil {
			return nil, err
		}
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return nil, fmt.Errorf("qmp %s: %v", c, err)
			}
			if strings.Contains(string(line), `"event"`) {
				continue
			}
			if strings.Contains(string(line), `"error"`) {
				return nil, fmt.Errorf("qmp %s: %s", c, line)
			}
			if c == command {
				return line, nil
			}
			break
		}
	}
	return nil, errors.New("unreachable")
}
