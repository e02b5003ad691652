package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// securityScript prints what the tests check, one key=value per line.
const securityScript = `
echo "id=$(id)"
echo "capeff=$(grep CapEff /proc/self/status | cut -f2)"
echo "seccomp=$(grep '^Seccomp:' /proc/self/status | cut -f2)"
for p in /proc/timer_list /proc/keys /proc/kcore; do
  [ -e $p ] || continue
  if [ -c $p ]; then echo "masked=yes"; else echo "masked=no"; fi
  break
done
if grep -q ' /proc/sys proc ro' /proc/mounts; then echo "procsys=ro"; else echo "procsys=rw"; fi
if grep -q ' /sys sysfs ro' /proc/mounts; then echo "sys=ro"; else echo "sys=rw"; fi
if touch /rootfs-write-probe 2>/dev/null; then echo "rootfs=rw"; else echo "rootfs=ro"; fi
echo "hostname=$(hostname)"
if unshare -U true 2>/dev/null; then echo "userns=allowed"; else echo "userns=denied"; fi
echo "home=$HOME"
echo "nofile=$(ulimit -n)"
`

func capMask(s capSet) string { return fmt.Sprintf("%016x", uint64(s)) }

// runtimeCanRunContainers skips when the host's cgroup set-up keeps the
// runtime from creating any container: crun refuses a hybrid host whose v2
// tree holds controllers (here, hugetlb).
func runtimeCanRunContainers(t *testing.T, binary string) {
	t.Helper()
	if binary != "crun" || currentHost().cgroup2 {
		return
	}
	data, err := os.ReadFile(filepath.Join(cgroupRoot, "unified", "cgroup.controllers"))
	if err == nil && strings.TrimSpace(string(data)) != "" {
		t.Skipf("crun refuses this hybrid cgroup host: the v2 tree holds controllers %q", strings.TrimSpace(string(data)))
	}
}

func TestContainerSeesGeneratedSecurity(t *testing.T) {
	for _, binary := range []string{"runc", "crun"} {
		t.Run(binary, func(t *testing.T) {
			rt := testRuntime(t, binary)
			runtimeCanRunContainers(t, binary)
			c := baseSpec(t, "/bin/sh", "-c", securityScript)
			c.Hostname = "probe-host"
			c.Security.ReadonlyRootfs = true
			c.Security.Seccomp = SeccompProfile{Type: ProfileRuntimeDefault}
			user, err := ResolveUser(sharedRootfs, "app", nil, "", nil, []int64{3000})
			if err != nil {
				t.Fatal(err)
			}
			c.User = user
			code, out := runContainer(t, rt, c)
			if code != 0 {
				t.Fatalf("exit code %d, output:\n%s", code, out)
			}
			checks := map[string]string{
				"id":       "uid=1000(app) gid=1000(app) groups=1000(app),2000(extra),3000",
				"seccomp":  "2",
				"masked":   "yes", // a /dev/null bind hides the path
				"procsys":  "ro",
				"sys":      "ro",
				"rootfs":   "ro",
				"hostname": "probe-host",
				"userns":   "denied",
				"home":     "/home/app",
				"nofile":   fmt.Sprint(min(uint64(defaultNofile), currentHost().nofileHard)),
				// A non-root process keeps no effective capabilities after exec.
				"capeff": capMask(0),
			}
			for key, want := range checks {
				if got := outputField(out, key); got != want {
					t.Errorf("%s = %q, want %q\noutput:\n%s", key, got, want, out)
				}
			}
		})
	}
}

func TestContainerCapabilitiesAndSeccomp(t *testing.T) {
	rt := testRuntime(t, "runc")
	available := currentHost().availableCaps()
	tests := []struct {
		name        string
		sec         Security
		wantCaps    capSet
		wantSeccomp string
		wantUserns  string
		wantMasked  string
		wantSys     string
	}{
		{
			name:     "default set, unconfined",
			wantCaps: capSetOf(DefaultCapabilities), wantSeccomp: "0", wantUserns: "allowed",
			wantMasked: "yes", wantSys: "ro",
		},
		{
			name:     "add and drop under RuntimeDefault",
			sec:      Security{AddCapabilities: []string{"net_admin"}, DropCapabilities: []string{"CHOWN", "KILL"}, Seccomp: SeccompProfile{Type: ProfileRuntimeDefault}},
			wantCaps: (capSetOf(DefaultCapabilities) | capSetOf([]string{"CAP_NET_ADMIN"})) &^ capSetOf([]string{"CAP_CHOWN", "CAP_KILL"}), wantSeccomp: "2", wantUserns: "denied",
			wantMasked: "yes", wantSys: "ro",
		},
		{
			name:     "privileged",
			sec:      Security{Privileged: true, Seccomp: SeccompProfile{Type: ProfileRuntimeDefault}},
			wantCaps: available, wantSeccomp: "0", wantUserns: "allowed",
			wantMasked: "no", wantSys: "rw",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := baseSpec(t, "/bin/sh", "-c", securityScript)
			c.Security = tt.sec
			code, out := runContainer(t, rt, c)
			if code != 0 {
				t.Fatalf("exit code %d, output:\n%s", code, out)
			}
			if got := outputField(out, "capeff"); got != capMask(tt.wantCaps) {
				t.Errorf("CapEff = %s, want %s (%v)", got, capMask(tt.wantCaps), tt.wantCaps.names())
			}
			if got := outputField(out, "seccomp"); got != tt.wantSeccomp {
				t.Errorf("Seccomp = %s, want %s", got, tt.wantSeccomp)
			}
			if got := outputField(out, "userns"); got != tt.wantUserns {
				t.Errorf("user namespace %s, want %s", got, tt.wantUserns)
			}
			if got := outputField(out, "masked"); got != tt.wantMasked {
				t.Errorf("/proc path masked: %q, want %q", got, tt.wantMasked)
			}
			if got := outputField(out, "sys"); got != tt.wantSys {
				t.Errorf("/sys is %s, want %s", got, tt.wantSys)
			}
			if got := outputField(out, "procsys"); got != tt.wantSys {
				t.Errorf("/proc/sys is %s, want %s", got, tt.wantSys)
			}
		})
	}
}

func TestContainerMountsAndDevices(t *testing.T) {
	rt := testRuntime(t, "runc")
	host := t.TempDir()
	roDir, rwDir := filepath.Join(host, "ro"), filepath.Join(host, "rw")
	for _, d := range []string{roDir, rwDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hosts := filepath.Join(host, "hosts")
	writeFile(t, hosts, "127.0.0.1 probe-hosts-entry\n")
	c := baseSpec(t, "/bin/sh", "-c", `
if touch /ro/x 2>/dev/null; then echo "ro=writable"; else echo "ro=readonly"; fi
echo from-container > /rw/file && echo "rw=ok"
echo "hosts=$(cat /etc/hosts)"
echo "zero=$(head -c 4 /dev/myzero | wc -c)"
echo "shm=$(stat -f -c %T /dev/shm)"
`)
	c.HostsPath = hosts
	c.Mounts = []Mount{{ContainerPath: "/ro", HostPath: roDir, Readonly: true}, {ContainerPath: "/rw", HostPath: rwDir}}
	c.Devices = []Device{{HostPath: "/dev/zero", ContainerPath: "/dev/myzero", Permissions: "r"}}
	code, out := runContainer(t, rt, c)
	if code != 0 {
		t.Fatalf("exit code %d, output:\n%s", code, out)
	}
	checks := map[string]string{"ro": "readonly", "rw": "ok", "hosts": "127.0.0.1 probe-hosts-entry", "zero": "4", "shm": "tmpfs"}
	for key, want := range checks {
		if got := outputField(out, key); got != want {
			t.Errorf("%s = %q, want %q\noutput:\n%s", key, got, want, out)
		}
	}
	if data, err := os.ReadFile(filepath.Join(rwDir, "file")); err != nil || string(data) != "from-container\n" {
		t.Errorf("host sees %q, %v in the rw mount", data, err)
	}
}

func memoryCgroupFile(parent, id, file string) string {
	return filepath.Join(cgroupRoot, "memory", parent, id, file)
}

func readTrimmed(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

func TestRuntimeLifecycle(t *testing.T) {
	rt := testRuntime(t, "runc")
	if currentHost().cgroup2 {
		t.Skip("checks v1 memory files")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := baseSpec(t, "/bin/sleep", "60")
	c.Resources = &Resources{MemoryLimitBytes: 64 << 20, PidsLimit: 50}
	tc := createContainer(t, rt, c)

	st, err := rt.State(ctx, c.ID)
	if err != nil || st.Status != StatusCreated || st.Pid <= 0 || st.Bundle != tc.bundle {
		t.Fatalf("state after create = %+v, %v; want created with a pid in bundle %s", st, err, tc.bundle)
	}
	if err := rt.Start(ctx, c.ID); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if st, err = rt.State(ctx, c.ID); err != nil || st.Status != StatusRunning {
		t.Fatalf("state after start = %+v, %v", st, err)
	}
	if got := readTrimmed(t, memoryCgroupFile(c.CgroupParent, c.ID, "memory.limit_in_bytes")); got != fmt.Sprint(64<<20) {
		t.Errorf("memory limit in the cgroup = %s, want %d", got, 64<<20)
	}

	newLimit := int64(96 << 20)
	if err := rt.Update(ctx, c.ID, &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &newLimit, Swap: &newLimit}}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if got := readTrimmed(t, memoryCgroupFile(c.CgroupParent, c.ID, "memory.limit_in_bytes")); got != fmt.Sprint(newLimit) {
		t.Errorf("memory limit after update = %s, want %d", got, newLimit)
	}

	if err := rt.Kill(ctx, c.ID, syscall.SIGKILL, false); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if code, err := tc.wait(5 * time.Second); err != nil || code != 128+int(syscall.SIGKILL) {
		t.Errorf("exit = %d, %v; want killed by SIGKILL", code, err)
	}
	if st, err = rt.State(ctx, c.ID); err != nil || st.Status != StatusStopped {
		t.Errorf("state after kill = %+v, %v; want stopped", st, err)
	}
	if err := rt.Delete(ctx, c.ID, false, ""); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := rt.State(ctx, c.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("State after delete: %v, want ErrNotFound", err)
	}
	if err := rt.Delete(ctx, c.ID, false, ""); err != nil {
		t.Errorf("second Delete: %v, want nil", err)
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "memory", c.CgroupParent, c.ID)); !os.IsNotExist(err) {
		t.Errorf("container cgroup left after delete: %v", err)
	}
}

func TestRuntimeReportsItsOwnErrors(t *testing.T) {
	for _, binary := range []string{"runc", "crun"} {
		t.Run(binary, func(t *testing.T) {
			rt := testRuntime(t, binary)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for op, call := range map[string]func() error{
				"state": func() error { _, err := rt.State(ctx, "ghost"); return err },
				"start": func() error { return rt.Start(ctx, "ghost") },
				"kill":  func() error { return rt.Kill(ctx, "ghost", syscall.SIGTERM, false) },
			} {
				err := call()
				if !errors.Is(err, ErrNotFound) {
					t.Errorf("%s of an unknown container: %v, want ErrNotFound", op, err)
				}
				var rerr *RuntimeError
				if !errors.As(err, &rerr) || rerr.Message == "" || !strings.Contains(err.Error(), rerr.Message) {
					t.Errorf("%s error %v does not carry the runtime's message", op, err)
				}
			}
			for _, force := range []bool{false, true} {
				if err := rt.Delete(ctx, "ghost", force, ""); err != nil {
					t.Errorf("Delete(force=%v) of an unknown container: %v", force, err)
				}
			}
			bundle := t.TempDir() // no config.json
			err := runtimeCreate(ctx, rt, "broken", bundle, nil)
			var rerr *RuntimeError
			if !errors.As(err, &rerr) || rerr.Message == "" {
				t.Fatalf("create of an empty bundle: %v, want the runtime's message", err)
			}
			if !strings.Contains(err.Error(), "config.json") {
				t.Errorf("create error %q does not mention the missing config.json", err)
			}
			_ = rt.Delete(ctx, "broken", true, "")
		})
	}
}

// processGone is true when pid no longer runs (a zombie counts as gone).
func processGone(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	return len(fields) > 0 && (fields[0] == "Z" || fields[0] == "X")
}

func TestDeleteForceRemovesARunningContainer(t *testing.T) {
	rt := testRuntime(t, "runc")
	c := baseSpec(t, "/bin/sleep", "60")
	tc := createContainer(t, rt, c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := rt.Start(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if err := rt.Delete(ctx, c.ID, true, ""); err != nil {
		t.Fatalf("Delete(force) of a running container: %v", err)
	}
	if _, err := rt.State(ctx, c.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("State after Delete(force): %v, want ErrNotFound", err)
	}
	if code, err := tc.wait(5 * time.Second); err != nil || code != 128+int(syscall.SIGKILL) {
		t.Errorf("init exit = %d, %v; want killed", code, err)
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "pids", c.CgroupParent, c.ID)); !os.IsNotExist(err) {
		t.Errorf("container cgroup left after Delete(force): %v", err)
	}
}
