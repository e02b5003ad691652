package oci

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func mountByDest(mounts []specs.Mount, dest string) (specs.Mount, bool) {
	i := slices.IndexFunc(mounts, func(m specs.Mount) bool { return m.Destination == dest })
	if i < 0 {
		return specs.Mount{}, false
	}
	return mounts[i], true
}

func destinations(mounts []specs.Mount) []string {
	out := make([]string, len(mounts))
	for i, m := range mounts {
		out[i] = m.Destination
	}
	return out
}

func TestStandardAndPodFileMounts(t *testing.T) {
	c := minimalSpec(t)
	c.HostsPath, c.ResolvConfPath, c.HostnamePath = "/pod/hosts", "/pod/resolv.conf", "/pod/hostname"
	c.ShmPath = "/pod/shm"
	s := mustGenerate(t, c, testHost())
	want := []string{"/proc", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/sys", "/sys/fs/cgroup", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf"}
	if got := destinations(s.Mounts); !slices.Equal(got, want) {
		t.Fatalf("mounts = %v, want %v", got, want)
	}
	shm, _ := mountByDest(s.Mounts, "/dev/shm")
	if shm.Type != "bind" || shm.Source != "/pod/shm" {
		t.Errorf("/dev/shm = %+v, want a bind of the pod's shm", shm)
	}
	hosts, _ := mountByDest(s.Mounts, "/etc/hosts")
	if hosts.Source != "/pod/hosts" || !slices.Contains(hosts.Options, "rw") {
		t.Errorf("/etc/hosts = %+v, want a rw bind of /pod/hosts", hosts)
	}

	c.Security.ReadonlyRootfs = true
	s = mustGenerate(t, c, testHost())
	for _, dest := range []string{"/etc/hosts", "/etc/resolv.conf", "/etc/hostname"} {
		if m, _ := mountByDest(s.Mounts, dest); !slices.Contains(m.Options, "ro") {
			t.Errorf("%s options %v with a read-only rootfs, want ro", dest, m.Options)
		}
	}
	if !s.Root.Readonly {
		t.Errorf("root not read-only")
	}
}

func TestShmMount(t *testing.T) {
	tests := []struct {
		name       string
		shmPath    string
		ipc        Namespace
		wantType   string
		wantSource string
	}{
		{name: "private tmpfs", wantType: "tmpfs", wantSource: "shm"},
		{name: "pod shm", shmPath: "/run/pod/shm", ipc: Namespace{Mode: NamespaceJoin, Path: "/x"}, wantType: "bind", wantSource: "/run/pod/shm"},
		{name: "host IPC shares the host's", shmPath: "/run/pod/shm", ipc: Namespace{Mode: NamespaceHost}, wantType: "bind", wantSource: "/dev/shm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := minimalSpec(t)
			c.ShmPath, c.Namespaces.IPC = tt.shmPath, tt.ipc
			s := mustGenerate(t, c, testHost())
			m, ok := mountByDest(s.Mounts, "/dev/shm")
			if !ok || m.Type != tt.wantType || m.Source != tt.wantSource {
				t.Errorf("/dev/shm = %+v, want type %s source %s", m, tt.wantType, tt.wantSource)
			}
		})
	}
}

func TestUserMounts(t *testing.T) {
	host := t.TempDir()
	data := filepath.Join(host, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(host, "link")
	if err := os.Symlink(data, link); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(host, "created", "by", "spec")
	c := minimalSpec(t)
	c.HostsPath = "/pod/hosts"
	c.Mounts = []Mount{
		{ContainerPath: "/data/sub", HostPath: data, Readonly: true},
		{ContainerPath: "/data", HostPath: link},
		{ContainerPath: "/etc/hosts", HostPath: data, SelinuxRelabel: true},
		{ContainerPath: "/dev/shm/", HostPath: data},
		{ContainerPath: "/new", HostPath: missing},
	}
	s := mustGenerate(t, c, testHost())

	got := destinations(s.Mounts)
	if i, j := slices.Index(got, "/data"), slices.Index(got, "/data/sub"); i < 0 || j < 0 || i > j {
		t.Errorf("mount order %v: /data must come before /data/sub", got)
	}
	if n := strings.Count(strings.Join(got, " "), "/etc/hosts"); n != 1 {
		t.Errorf("/etc/hosts mounted %d times, want the user's only: %v", n, got)
	}
	if m, _ := mountByDest(s.Mounts, "/etc/hosts"); m.Source != data {
		t.Errorf("/etc/hosts source %q, want the user's %q", m.Source, data)
	}
	if m, _ := mountByDest(s.Mounts, "/dev/shm"); m.Source != data {
		t.Errorf("/dev/shm = %+v, want the user's bind replacing the standard one", m)
	}
	if m, _ := mountByDest(s.Mounts, "/data"); m.Source != data {
		t.Errorf("/data source %q, want the symlink resolved to %q", m.Source, data)
	}
	if m, _ := mountByDest(s.Mounts, "/data/sub"); !slices.Equal(m.Options, []string{"rbind", "rprivate", "ro"}) || m.Type != "bind" {
		t.Errorf("/data/sub = %+v, want a private read-only rbind", m)
	}
	if fi, err := os.Stat(missing); err != nil || !fi.IsDir() {
		t.Errorf("missing mount source not created as a directory: %v", err)
	}
}

// TestRecursiveReadOnlyMount: "rro" in place of "ro", which runc applies
// to the submounts too.
func TestRecursiveReadOnlyMount(t *testing.T) {
	c := minimalSpec(t)
	c.Mounts = []Mount{{ContainerPath: "/data", HostPath: t.TempDir(), Readonly: true, RecursiveReadOnly: true}}
	s := mustGenerate(t, c, testHost())
	if m, _ := mountByDest(s.Mounts, "/data"); !slices.Equal(m.Options, []string{"rbind", "rprivate", "rro"}) {
		t.Errorf("/data options %v, want rbind rprivate rro", m.Options)
	}
}

// TestInertMount: an image volume's bind carries nosuid and nodev, which
// runc applies when it remounts the bind, and not noexec (KEP-4639).
func TestInertMount(t *testing.T) {
	c := minimalSpec(t)
	c.Mounts = []Mount{{ContainerPath: "/vol", HostPath: t.TempDir(), Readonly: true, Inert: true}}
	s := mustGenerate(t, c, testHost())
	if m, _ := mountByDest(s.Mounts, "/vol"); !slices.Equal(m.Options, []string{"rbind", "rprivate", "ro", "nosuid", "nodev"}) {
		t.Errorf("/vol options %v, want rbind rprivate ro nosuid nodev", m.Options)
	}
}

// TestBindOptions: a request's noexec, nodev, nosuid go after the mode, in
// the options runc turns into the one remount of the bind, each once, so
// that an "rw" mount keeps them; nothing else is taken, and nothing that
// would clear a flag or the read-only mode.
func TestBindOptions(t *testing.T) {
	tests := []struct {
		name    string
		m       Mount
		want    []string
		invalid bool
	}{
		{"rw with nosuid", Mount{Options: []string{"nosuid"}}, []string{"rbind", "rprivate", "rw", "nosuid"}, false},
		{"ro with all three", Mount{Readonly: true, Options: []string{"noexec", "nodev", "nosuid"}}, []string{"rbind", "rprivate", "ro", "noexec", "nodev", "nosuid"}, false},
		{"rro with noexec", Mount{Readonly: true, RecursiveReadOnly: true, Options: []string{"noexec"}}, []string{"rbind", "rprivate", "rro", "noexec"}, false},
		{"repeated", Mount{Options: []string{"noexec", "noexec", "noexec"}}, []string{"rbind", "rprivate", "rw", "noexec"}, false},
		{"inert with noexec", Mount{Readonly: true, Inert: true, Options: []string{"noexec"}}, []string{"rbind", "rprivate", "ro", "nosuid", "nodev", "noexec"}, false},
		{"rw on a read-only mount", Mount{Readonly: true, Options: []string{"rw"}}, nil, true},
		{"exec", Mount{Options: []string{"noexec", "exec"}}, nil, true},
		{"suid", Mount{Options: []string{"suid"}}, nil, true},
		{"dev", Mount{Options: []string{"dev"}}, nil, true},
		{"rshared", Mount{Options: []string{"rshared"}}, nil, true},
		{"remount", Mount{Options: []string{"remount"}}, nil, true},
		{"empty", Mount{Options: []string{""}}, nil, true},
		{"two in one", Mount{Options: []string{"noexec,suid"}}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := minimalSpec(t)
			tt.m.ContainerPath, tt.m.HostPath = "/data", t.TempDir()
			c.Mounts = []Mount{tt.m}
			s, err := generateSpec(&c, testHost())
			if tt.invalid {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("err = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m, _ := mountByDest(s.Mounts, "/data"); !slices.Equal(m.Options, tt.want) {
				t.Errorf("/data options %v, want %v", m.Options, tt.want)
			}
		})
	}
}

func TestUserDevMountReplacesDevMounts(t *testing.T) {
	c := minimalSpec(t)
	c.Mounts = []Mount{{ContainerPath: "/dev", HostPath: "/dev"}}
	s := mustGenerate(t, c, testHost())
	for _, m := range s.Mounts {
		if strings.HasPrefix(m.Destination, "/dev/") {
			t.Errorf("standard %s kept under the user's /dev", m.Destination)
		}
	}
}

func TestUserMountErrors(t *testing.T) {
	tests := []struct {
		name string
		m    Mount
	}{
		{"relative container path", Mount{ContainerPath: "data", HostPath: "/tmp"}},
		{"relative host path", Mount{ContainerPath: "/data", HostPath: "tmp"}},
		{"unknown propagation", Mount{ContainerPath: "/data", HostPath: "/tmp", Propagation: 7}},
		{"recursive read-only but writable", Mount{ContainerPath: "/data", HostPath: "/tmp", RecursiveReadOnly: true}},
		{"recursive read-only but slave", Mount{ContainerPath: "/data", HostPath: "/tmp", RecursiveReadOnly: true, Readonly: true, Propagation: PropagationHostToContainer}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := minimalSpec(t)
			c.Mounts = []Mount{tt.m}
			if _, err := generateSpec(&c, testHost()); !errors.Is(err, ErrInvalid) {
				t.Errorf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestMountPropagation(t *testing.T) {
	dir := t.TempDir()
	mountinfo := filepath.Join(dir, "mountinfo")
	shared := filepath.Join(dir, "shared")
	slave := filepath.Join(dir, "slave")
	for _, d := range []string{shared, slave} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	info := "1 0 8:1 / / rw - ext4 /dev/sda rw\n" +
		"2 1 8:2 / " + shared + " rw shared:5 - ext4 /dev/sdb rw\n" +
		"3 1 8:3 / " + slave + " rw master:7 - ext4 /dev/sdc rw\n"
	if err := os.WriteFile(mountinfo, []byte(info), 0o644); err != nil {
		t.Fatal(err)
	}
	host := testHost()
	host.mountInfo = mountinfo

	tests := []struct {
		name       string
		source     string
		p          Propagation
		wantOption string
		wantRootfs string
		wantErr    bool
	}{
		{name: "private on a private mount", source: dir, p: PropagationPrivate, wantOption: "rprivate"},
		{name: "host-to-container on a slave mount", source: slave, p: PropagationHostToContainer, wantOption: "rslave", wantRootfs: "rslave"},
		{name: "host-to-container on a shared mount", source: shared, p: PropagationHostToContainer, wantOption: "rslave", wantRootfs: "rslave"},
		{name: "bidirectional on a shared mount", source: shared, p: PropagationBidirectional, wantOption: "rshared", wantRootfs: "rshared"},
		{name: "bidirectional on a slave mount", source: slave, p: PropagationBidirectional, wantErr: true},
		{name: "host-to-container on a private mount", source: dir, p: PropagationHostToContainer, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := minimalSpec(t)
			c.Mounts = []Mount{{ContainerPath: "/m", HostPath: tt.source, Propagation: tt.p}}
			s, err := generateSpec(&c, host)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.source) {
					t.Fatalf("err = %v, want ErrInvalid naming %s", err, tt.source)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m, _ := mountByDest(s.Mounts, "/m")
			if !slices.Contains(m.Options, tt.wantOption) {
				t.Errorf("options %v, want %s", m.Options, tt.wantOption)
			}
			if s.Linux.RootfsPropagation != tt.wantRootfs {
				t.Errorf("rootfs propagation %q, want %q", s.Linux.RootfsPropagation, tt.wantRootfs)
			}
		})
	}
}

func TestDevices(t *testing.T) {
	if _, err := os.Stat("/dev/null"); err != nil {
		t.Skip("no /dev/null")
	}
	notDevice := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDevice, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		d         Device
		wantNode  specs.LinuxDevice
		wantRule  string
		wantError bool
	}{
		{name: "char device", d: Device{HostPath: "/dev/null", ContainerPath: "/dev/mynull", Permissions: "rw"}, wantNode: specs.LinuxDevice{Path: "/dev/mynull", Type: "c", Major: 1, Minor: 3}, wantRule: "rw"},
		{name: "container path defaults to host path", d: Device{HostPath: "/dev/zero"}, wantNode: specs.LinuxDevice{Path: "/dev/zero", Type: "c", Major: 1, Minor: 5}, wantRule: "rwm"},
		{name: "bad permissions", d: Device{HostPath: "/dev/null", Permissions: "rwx"}, wantError: true},
		{name: "not a device", d: Device{HostPath: notDevice, ContainerPath: "/dev/x"}, wantError: true},
		{name: "missing", d: Device{HostPath: "/dev/does-not-exist", ContainerPath: "/dev/x"}, wantError: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := minimalSpec(t)
			c.Devices = []Device{tt.d}
			s, err := generateSpec(&c, testHost())
			if tt.wantError {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("err = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Linux.Devices) != 1 {
				t.Fatalf("devices = %+v, want one", s.Linux.Devices)
			}
			got := s.Linux.Devices[0]
			if got.Path != tt.wantNode.Path || got.Type != tt.wantNode.Type || got.Major != tt.wantNode.Major || got.Minor != tt.wantNode.Minor || got.FileMode == nil {
				t.Errorf("device = %+v, want %+v with a mode", got, tt.wantNode)
			}
			rules := s.Linux.Resources.Devices
			last := rules[len(rules)-1]
			if !last.Allow || last.Type != "c" || *last.Major != tt.wantNode.Major || *last.Minor != tt.wantNode.Minor || last.Access != tt.wantRule {
				t.Errorf("last device rule = %+v, want allow c %d:%d %s", last, tt.wantNode.Major, tt.wantNode.Minor, tt.wantRule)
			}
		})
	}
}

func TestDeviceDirectory(t *testing.T) {
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("no /dev/net/tun")
	}
	c := minimalSpec(t)
	c.Devices = []Device{{HostPath: "/dev/net", ContainerPath: "/dev/hostnet"}}
	s := mustGenerate(t, c, testHost())
	if !slices.ContainsFunc(s.Linux.Devices, func(d specs.LinuxDevice) bool { return d.Path == "/dev/hostnet/tun" }) {
		t.Errorf("devices %+v lack /dev/hostnet/tun", s.Linux.Devices)
	}
}
