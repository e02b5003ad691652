//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The CRI v0.37 features of issue 32: bind mount options (KEP-5855), user
// namespaces on the host's network (KEP-5607), OCI artifacts as image
// volumes.

// mountFlags are the per-mount options of dest in a container's
// /proc/self/mountinfo text (the sixth field), or nil.
func mountFlags(mountinfo, dest string) []string {
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == dest {
			return strings.Split(f[5], ",")
		}
	}
	return nil
}

// A noexec bind mount refuses to run a binary that a plain one runs, an rw
// bind with nosuid keeps nosuid (and stays rw), a read-only one takes all
// three in the same remount; on Debian's runc 1.1.5 and on runc 1.5.2. An
// option that would give back what the node withholds is refused, naming
// the field.
func TestBindMountOptions(t *testing.T) {
	requireCurrentRunc(t)
	d := StartDaemon(t)
	d.bridgeNetwork(t)
	ref := busyboxRef(t)
	d.pull(t, ref)

	resp, err := d.Runtime.Status(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetFeatures().GetMountOptions() {
		t.Errorf("Status features %v: want mount_options", resp.GetFeatures())
	}
	var perHandler map[string]struct{ MountOptions []string }
	if err := json.Unmarshal([]byte(resp.GetInfo()["runtimeHandlerFeatures"]), &perHandler); err != nil {
		t.Fatalf("runtimeHandlerFeatures %q: %v", resp.GetInfo()["runtimeHandlerFeatures"], err)
	}

	for _, handler := range []string{"runc", usernsHandler} {
		t.Run(handler, func(t *testing.T) {
			if got := perHandler[handler].MountOptions; !slices.Equal(got, []string{"noexec", "nodev", "nosuid"}) {
				t.Errorf("verbose Status: handler %s mount options %v, want noexec nodev nosuid", handler, got)
			}
			cfg := d.podConfig("bind-options")
			podID := d.runPodOn(t, cfg, handler)
			ctr := containerConfig("check", ref, "sh", "-c",
				`cp /bin/busybox /plain/bb && cp /bin/busybox /noexec/bb && `+
					`{ /plain/bb true && echo plain=ran || echo plain=refused; }; `+
					`{ /noexec/bb true 2>/dev/null && echo noexec=ran || echo noexec=refused; }; `+
					`echo written > /nosuid/f && echo nosuid=writable; cat /proc/self/mountinfo`)
			ctr.Mounts = []*runtime.Mount{
				{ContainerPath: "/plain", HostPath: t.TempDir()},
				{ContainerPath: "/noexec", HostPath: t.TempDir(), MountOptions: []string{"noexec"}},
				{ContainerPath: "/nosuid", HostPath: t.TempDir(), MountOptions: []string{"nosuid"}},
				{ContainerPath: "/ro", HostPath: t.TempDir(), Readonly: true, MountOptions: []string{"noexec", "nodev", "nosuid"}},
			}
			st, out := d.runToExit(t, podID, cfg, ctr)
			if st.GetExitCode() != 0 {
				t.Fatalf("container exited %d:\n%s", st.GetExitCode(), out)
			}
			for _, want := range []string{"plain=ran", "noexec=refused", "nosuid=writable"} {
				if !strings.Contains(out, want+"\n") {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			for dest, want := range map[string][]string{
				"/plain":  {"rw"},
				"/noexec": {"rw", "noexec"},
				"/nosuid": {"rw", "nosuid"},
				"/ro":     {"ro", "nosuid", "nodev", "noexec"},
			} {
				got := mountFlags(out, dest)
				for _, w := range want {
					if !slices.Contains(got, w) {
						t.Errorf("%s mounted %v, want %v in it", dest, got, want)
					}
				}
				if dest == "/plain" && (slices.Contains(got, "noexec") || slices.Contains(got, "nosuid")) {
					t.Errorf("/plain mounted %v: options of another mount leaked onto it", got)
				}
			}

			// Nothing that takes a protection away.
			for _, opt := range []string{"exec", "suid", "dev", "rw"} {
				bad := containerConfig("bad-"+opt, ref, "true")
				bad.Mounts = []*runtime.Mount{{ContainerPath: "/data", HostPath: t.TempDir(), Readonly: true, MountOptions: []string{"nosuid", opt}}}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := d.Runtime.CreateContainer(ctx, podID, bad, cfg)
				cancel()
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "config.mounts.mount_options") {
					t.Errorf("CreateContainer with mount option %q = %v, want InvalidArgument naming config.mounts.mount_options", opt, err)
				}
			}
		})
	}
}

// A hostNetwork pod with hostUsers: false (KEP-5607) runs in its own user
// namespace with its mapped IDs, on the host's network and UTS namespaces:
// it sees the host's interfaces in /sys/class/net, the host's /sys read-only.
func TestUserNamespaceHostNetworkPod(t *testing.T) {
	d, ref := startUsernsDaemon(t)
	resp, err := d.Runtime.Status(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetFeatures().GetUserNamespacesHostNetwork() {
		t.Errorf("Status features %v: want user_namespaces_host_network", resp.GetFeatures())
	}

	cfg := d.usernsPodConfig("userns-hostnet")
	cfg.Linux.SecurityContext.NamespaceOptions.Network = runtime.NamespaceMode_NODE
	podID := d.runPodOn(t, cfg, usernsHandler)
	ctr := containerConfig("check", ref, "sh", "-c",
		`cat /proc/self/uid_map; echo id=$(id -u); echo net=$(readlink /proc/self/ns/net); echo host=$(hostname); `+
			`echo ifaces=$(ls /sys/class/net | tr '\n' ' '); echo lo=$(cat /sys/class/net/lo/operstate); `+
			`cat /proc/self/mountinfo`)
	ctr.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
		NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE, Pid: runtime.NamespaceMode_CONTAINER, UsernsOptions: usernsOptions()},
	}}
	st, out := d.runToExit(t, podID, cfg, ctr)
	if st.GetExitCode() != 0 {
		t.Fatalf("container exited %d:\n%s", st.GetExitCode(), out)
	}
	if f := strings.Fields(out); len(f) < 3 || strings.Join(f[:3], " ") != "0 3145728 65536" {
		t.Errorf("uid_map = %q, want 0 3145728 65536", f)
	}
	hostNet, _ := os.Readlink("/proc/self/ns/net")
	hostName, _ := os.Hostname()
	for _, want := range []string{"id=0", "net=" + hostNet, "host=" + hostName, "lo=unknown"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The host's own interfaces: lo and that of its default route (other
	// tests' veths come and go meanwhile).
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "ifaces=") {
			line = " " + strings.TrimPrefix(l, "ifaces=")
		}
	}
	for _, name := range []string{"lo", defaultRouteInterface(t)} {
		if !strings.Contains(line, " "+name+" ") {
			t.Errorf("/sys/class/net in the pod lists %q, without the host's %s", line, name)
		}
	}
	if got := mountFlags(out, "/sys"); !slices.Contains(got, "ro") || !slices.Contains(got, "nosuid") {
		t.Errorf("/sys mounted %v, want ro and nosuid", got)
	}
}

// defaultRouteInterface is the host's interface of its IPv4 default route.
func defaultRouteInterface(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/proc/net/route")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 2 && f[1] == "00000000" {
			return f[0]
		}
	}
	t.Fatal("the host has no IPv4 default route")
	return ""
}
