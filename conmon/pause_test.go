package conmon_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minicri/minicri/conmon"
)

// procStatus is /proc/PID/status as field name to value.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if name, value, ok := strings.Cut(line, ":"); ok {
			fields[name] = strings.Join(strings.Fields(value), " ")
		}
	}
	return fields
}

// assertConfined checks what cmd/minicri-pause promises once StartPause
// returns (docs/security.md): uid and gid (as the host sees them), no
// capability in any set, no_new_privs, a seccomp filter, not dumpable, and
// a mount table of one read-only tmpfs. hostRoot is the host uid of the
// root of its user namespace.
func assertConfined(t *testing.T, in conmon.Infra, hostRoot int) {
	t.Helper()
	st := procStatus(t, in.PID)
	ids := strings.Repeat(strconv.Itoa(hostRoot+conmon.PauseID)+" ", 4)
	want := map[string]string{
		"Uid": ids[:len(ids)-1], "Gid": ids[:len(ids)-1], "Groups": "",
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2",
	}
	for name, value := range want {
		if st[name] != value {
			t.Errorf("infra process %s: %q, want %q", name, st[name], value)
		}
	}
	// The kernel gives the /proc files of a process that is not dumpable
	// to the root of its user namespace, whatever its uid.
	var fi syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/environ", in.PID), &fi); err != nil || int(fi.Uid) != hostRoot {
		t.Errorf("/proc/%d/environ owned by uid %d (err %v), want %d: the process is dumpable", in.PID, fi.Uid, err, hostRoot)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", in.PID))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if f := strings.Fields(lines[0]); len(lines) != 1 || len(f) < 9 || f[4] != "/" || !strings.HasPrefix(f[5], "ro,") || f[8] != "tmpfs" {
		t.Errorf("infra process mount table:\n%s\nwant one read-only tmpfs on /", b)
	}
	assertSealedExe(t, in.PID)
	if rec, err := conmon.RecordedInfra(podDirOf(t, in)); err != nil || rec != in {
		t.Errorf("the pod dir records %+v (%v), want the confined infra process %+v", rec, err, in)
	}
}

// assertSealedExe checks that the infra process runs from the daemon's
// sealed copy of minicri-pause (pause_sealed.go), not the installed file,
// and that the copy cannot be written, even by root.
func assertSealedExe(t *testing.T, pid int) {
	t.Helper()
	exe := fmt.Sprintf("/proc/%d/exe", pid)
	if target, err := os.Readlink(exe); err != nil || target != "/memfd:minicri-pause (deleted)" {
		t.Errorf("%s -> %q (%v), want the sealed memfd", exe, target, err)
	}
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) != "minicri-pause" {
		t.Errorf("infra process comm %q, want minicri-pause", comm)
	}
	if f, err := os.OpenFile(exe, os.O_WRONLY, 0); err == nil {
		_, err = f.Write([]byte("x"))
		f.Close()
		if err == nil {
			t.Errorf("root wrote the infra process's executable through %s", exe)
		}
	}
}

// podDirOf is the pod dir on the infra process's command line.
func podDirOf(t *testing.T, in conmon.Infra) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", in.PID))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	return args[len(args)-1]
}

func TestStartPauseConfines(t *testing.T) {
	requireRuntime(t)
	in, err := conmon.StartPause(monitorBinary, t.TempDir(), conmon.PauseOptions{})
	if err != nil {
		t.Fatalf("StartPause: %v", err)
	}
	t.Cleanup(func() { conmon.StopPause(context.Background(), in) })
	assertConfined(t, in, 0)
}

func TestStartPauseInUserNSConfines(t *testing.T) {
	requireRuntime(t)
	// A range no other test maps.
	const hostBase = 3 << 20
	maps := []conmon.IDMap{{ContainerID: 0, HostID: hostBase, Size: 65536}}
	for _, hostNetwork := range []bool{false, true} {
		t.Run(fmt.Sprintf("hostNetwork=%v", hostNetwork), func(t *testing.T) {
			in, err := conmon.StartPauseInUserNS(monitorBinary, t.TempDir(), maps, maps, conmon.PauseOptions{}, hostNetwork)
			if err != nil {
				t.Fatalf("StartPauseInUserNS: %v", err)
			}
			t.Cleanup(func() { conmon.StopPause(context.Background(), in) })
			for _, kind := range []string{"user", "net", "uts", "ipc"} {
				self, _ := os.Readlink("/proc/self/ns/" + kind)
				ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", in.PID, kind))
				// The host's network and UTS namespaces with hostNetwork
				// (KEP-5607), else new ones; always a new user and IPC.
				wantHost := hostNetwork && (kind == "net" || kind == "uts")
				if err != nil || (ns == self) != wantHost {
					t.Errorf("infra %s namespace %q (err %v), host's %q; want the host's: %v", kind, ns, err, self, wantHost)
				}
			}
			assertConfined(t, in, hostBase)
		})
	}
}

// TestStartPauseInUserNSRefusesUnmappedPauseID: with 65535 unmapped the
// infra process could not leave the namespace's root; nothing is started.
func TestStartPauseInUserNSRefusesUnmappedPauseID(t *testing.T) {
	small := []conmon.IDMap{{ContainerID: 0, HostID: 3 << 20, Size: 1000}}
	full := []conmon.IDMap{{ContainerID: 0, HostID: 3 << 20, Size: 65536}}
	for _, tc := range []struct {
		name       string
		uids, gids []conmon.IDMap
		want       string
	}{
		{"uids", small, full, "the uid mappings"},
		{"gids", full, small, "the gid mappings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := conmon.StartPauseInUserNS("/nonexistent/minicri-conmon", "/pod", tc.uids, tc.gids, conmon.PauseOptions{}, false)
			if !errors.Is(err, conmon.ErrPauseIDUnmapped) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("StartPauseInUserNS = %v, want ErrPauseIDUnmapped naming %q", err, tc.want)
			}
		})
	}
}

func TestStartPauseWithoutBinary(t *testing.T) {
	monitor := filepath.Join(t.TempDir(), "minicri-conmon")
	_, err := conmon.StartPause(monitor, "/pod", conmon.PauseOptions{})
	if !errors.Is(err, conmon.ErrNoPauseBinary) || !strings.Contains(err.Error(), filepath.Join(filepath.Dir(monitor), conmon.PauseBinaryName)) {
		t.Errorf("StartPause without minicri-pause = %v, want ErrNoPauseBinary naming where it looked", err)
	}
}

// TestStartPauseFailsUntilConfined plays infra processes that do not
// confine themselves: StartPause must fail with what they said and leave
// none of them running.
func TestStartPauseFailsUntilConfined(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: starts a process in a new PID namespace")
	}
	for _, tc := range []struct {
		name, script, want string
	}{
		{"exits with a message", `echo "minicri-pause: pivot_root: Invalid argument" >&2; exit 1`, "pivot_root: Invalid argument"},
		{"says why but stays", `echo "minicri-pause: set uid 65535: Invalid argument" >&2; exec sleep 60 2>&- 3>&-`, "set uid 65535"},
		{"closes its pipe without a word", `exec 2>&- 3>&-; exec sleep 60`, "closed its pipe before it was confined"},
		{"says ready too soon, then fails", `echo ready >&3; echo "minicri-pause: install the seccomp filter: Invalid argument" >&2; exit 1`, "install the seccomp filter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			nsFile := filepath.Join(dir, "pidns")
			script := fmt.Sprintf("#!/bin/sh\nreadlink /proc/self/ns/pid >%s\n%s\n", nsFile, tc.script)
			if err := os.WriteFile(filepath.Join(dir, conmon.PauseBinaryName), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			_, err := conmon.StartPause(filepath.Join(dir, "minicri-conmon"), dir, conmon.PauseOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("StartPause = %v, want an error saying %q", err, tc.want)
			}
			// It is PID 1 of a namespace of its own: no process may be
			// left in that namespace.
			ns, err := os.ReadFile(nsFile)
			if err != nil || len(ns) == 0 {
				t.Fatalf("the fake infra process never ran: %v", err)
			}
			if pids := inPIDNamespace(strings.TrimSpace(string(ns))); len(pids) > 0 {
				t.Errorf("processes %v left in the failed infra process's PID namespace", pids)
			}
		})
	}
}

// inPIDNamespace lists the processes in the PID namespace ns ("pid:[N]").
func inPIDNamespace(ns string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); link == ns {
			pids = append(pids, pid)
		}
	}
	return pids
}

// A user-namespaced pod's infra process starts from binaries under a
// directory that its host uid cannot search (a checkout under /root, a
// mktemp dir): it is exec'd from the daemon's sealed copy, not by path.
func TestStartPauseInUserNSFromPrivateDir(t *testing.T) {
	requireRuntime(t)
	private := t.TempDir()
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(private, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{monitorBinary, pauseBinary} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, filepath.Base(src)), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const hostBase = 4 << 20 // a range no other test maps
	maps := []conmon.IDMap{{ContainerID: 0, HostID: hostBase, Size: 65536}}
	in, err := conmon.StartPauseInUserNS(filepath.Join(bin, "minicri-conmon"), t.TempDir(), maps, maps, conmon.PauseOptions{}, false)
	if err != nil {
		t.Fatalf("StartPauseInUserNS from under a 0700 dir: %v", err)
	}
	t.Cleanup(func() { conmon.StopPause(context.Background(), in) })
	assertConfined(t, in, hostBase)
}

// An infra process told to take an AppArmor profile takes it or fails the
// pod: on this host (no AppArmor) the change cannot be made, and StartPause
// says so rather than run it unconfined. On an AppArmor host (the Debian 12
// guest) the process runs under the profile (guest test).
func TestStartPauseAppliesAppArmorOrFails(t *testing.T) {
	requireRuntime(t)
	if b, _ := os.ReadFile("/sys/module/apparmor/parameters/enabled"); strings.HasPrefix(string(b), "Y") {
		t.Skip("AppArmor is on here: the guest tests check the profile")
	}
	_, err := conmon.StartPause(monitorBinary, t.TempDir(), conmon.PauseOptions{AppArmorProfile: "minicri-default"})
	if err == nil || !strings.Contains(err.Error(), "AppArmor") {
		t.Fatalf("StartPause with an AppArmor profile on a host without AppArmor = %v, want a failure naming AppArmor", err)
	}
}

// minicri-pause does nothing, not even confine itself, before the daemon
// has recorded it (one byte on its fd 5): a daemon that dies first closes
// that pipe, and the process exits at once, so that no infra process runs
// that no pod dir names.
func TestPauseWaitsForItsRecord(t *testing.T) {
	requireRuntime(t)
	start := func(t *testing.T) (cmd *exec.Cmd, ready, goW *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		goR, goW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		// fd 4 stands in for the sealed copy, fd 5 is the go pipe.
		cmd = exec.Command(pauseBinary, "pause")
		cmd.Stderr = w
		cmd.ExtraFiles = []*os.File{w, goR, goR}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Cloneflags: syscall.CLONE_NEWPID}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w.Close()
		goR.Close()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			r.Close()
			goW.Close()
		})
		return cmd, r, goW
	}
	t.Run("daemon gone first", func(t *testing.T) {
		cmd, ready, goW := start(t)
		goW.Close() // what the daemon's death does
		_ = ready.SetReadDeadline(time.Now().Add(30 * time.Second))
		msg, _ := io.ReadAll(ready)
		if !strings.Contains(string(msg), "wait for the daemon's record") {
			t.Fatalf("minicri-pause with its go pipe closed said %q, want it to end naming the record", msg)
		}
		var exit *exec.ExitError
		if err := cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("minicri-pause with its go pipe closed: %v, want exit 1", err)
		}
	})
	t.Run("recorded", func(t *testing.T) {
		cmd, ready, goW := start(t)
		// Not yet let run: still root, unconfined, waiting.
		time.Sleep(100 * time.Millisecond)
		if st := procStatus(t, cmd.Process.Pid); st["Seccomp"] != "0" || !strings.HasPrefix(st["Uid"], "0") {
			t.Errorf("minicri-pause went on before its go byte: Seccomp %s, Uid %s", st["Seccomp"], st["Uid"])
		}
		if _, err := goW.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		_ = ready.SetReadDeadline(time.Now().Add(30 * time.Second))
		msg, _ := io.ReadAll(ready)
		if string(msg) != "ready\n" {
			t.Errorf("minicri-pause once let run said %q, want ready", msg)
		}
	})
}
