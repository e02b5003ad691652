package oci

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/minicri/minicri/internal/mountinfo"
)

// testHost is a cgroup v1 host with swap accounting, no AppArmor, every
// capability, a daemon oom_score_adj of 0, a generous NOFILE limit and the
// test's own mount table.
func testHost() hostFacts {
	return hostFacts{
		oomScoreAdj:    0,
		nofileHard:     1 << 24,
		lastCap:        40,
		boundingCaps:   ^capSet(0),
		swapAccounting: true,
		hugetlb:        true,
		mountInfo:      mountinfo.Path,
	}
}

func minimalSpec(t *testing.T) ContainerSpec {
	t.Helper()
	return ContainerSpec{ID: "abc", Rootfs: "/rootfs", Args: []string{"/bin/true"}, CgroupParent: "/pod"}
}

func mustGenerate(t *testing.T, c ContainerSpec, h hostFacts) *specs.Spec {
	t.Helper()
	s, err := generateSpec(&c, h)
	if err != nil {
		t.Fatalf("generateSpec: %v", err)
	}
	return s
}

func capsOf(names ...string) []string {
	set := capSetOf(names)
	return set.names()
}

func TestCapabilities(t *testing.T) {
	withoutSysResource := testHost()
	withoutSysResource.boundingCaps &^= 1 << capabilityNumbers["CAP_SYS_RESOURCE"]
	oldKernel := testHost()
	oldKernel.lastCap = capabilityNumbers["CAP_AUDIT_READ"]
	all := func(h hostFacts) []string { return h.availableCaps().names() }
	allBut := func(h hostFacts, drop string) []string {
		return slices.DeleteFunc(all(h), func(n string) bool { return n == drop })
	}

	tests := []struct {
		name    string
		sec     Security
		host    hostFacts
		want    []string
		wantErr string
	}{
		{name: "default set", want: capsOf(DefaultCapabilities...)},
		{
			name: "add in any spelling, drop one",
			sec:  Security{AddCapabilities: []string{"net_admin", "CAP_sys_time", "SYS_NICE"}, DropCapabilities: []string{"chown"}},
			want: capsOf(append(slices.DeleteFunc(slices.Clone(DefaultCapabilities), func(n string) bool { return n == "CAP_CHOWN" }),
				"CAP_NET_ADMIN", "CAP_SYS_TIME", "CAP_SYS_NICE")...),
		},
		{name: "add ALL, drop one", sec: Security{AddCapabilities: []string{"ALL"}, DropCapabilities: []string{"CHOWN"}}, want: allBut(testHost(), "CAP_CHOWN")},
		{name: "drop ALL, add one", sec: Security{AddCapabilities: []string{"NET_BIND_SERVICE"}, DropCapabilities: []string{"all"}}, want: capsOf("CAP_NET_BIND_SERVICE")},
		{name: "drop ALL", sec: Security{DropCapabilities: []string{"ALL"}}, want: []string{}},
		{name: "drop wins over add", sec: Security{AddCapabilities: []string{"NET_ADMIN"}, DropCapabilities: []string{"NET_ADMIN"}}, want: capsOf(DefaultCapabilities...)},
		{name: "privileged gets everything", sec: Security{Privileged: true, DropCapabilities: []string{"ALL"}}, want: all(testHost())},
		{name: "everything is the daemon's bounding set", sec: Security{Privileged: true}, host: withoutSysResource, want: allBut(withoutSysResource, "CAP_SYS_RESOURCE")},
		{name: "everything stops at the kernel's last capability", sec: Security{AddCapabilities: []string{"ALL"}}, host: oldKernel, want: capSet(1<<(capabilityNumbers["CAP_AUDIT_READ"]+1) - 1).names()},
		{name: "unknown name is named", sec: Security{AddCapabilities: []string{"NET_ADMIN", "FLY"}}, wantErr: `"FLY"`},
		{name: "unknown drop is named", sec: Security{DropCapabilities: []string{"cap_bogus"}}, wantErr: `"cap_bogus"`},
		{name: "unavailable capability is named", sec: Security{AddCapabilities: []string{"SYS_RESOURCE"}}, host: withoutSysResource, wantErr: "CAP_SYS_RESOURCE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := tt.host
			if host == (hostFacts{}) {
				host = testHost()
			}
			c := minimalSpec(t)
			c.Security = tt.sec
			s, err := generateSpec(&c, host)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrInvalid naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			caps := s.Process.Capabilities
			for set, got := range map[string][]string{"bounding": caps.Bounding, "effective": caps.Effective, "permitted": caps.Permitted} {
				if !slices.Equal(got, tt.want) {
					t.Errorf("%s = %v, want %v", set, got, tt.want)
				}
			}
			if len(caps.Inheritable) != 0 || len(caps.Ambient) != 0 {
				t.Errorf("inheritable %v, ambient %v: want none", caps.Inheritable, caps.Ambient)
			}
		})
	}
}

func TestPrivilegedSpec(t *testing.T) {
	c := minimalSpec(t)
	c.Security = Security{
		Privileged:    true,
		Seccomp:       SeccompProfile{Type: ProfileRuntimeDefault},
		MaskedPaths:   []string{"/proc/kcore"},
		ReadonlyPaths: []string{"/proc/sys"},
	}
	s := mustGenerate(t, c, testHost())
	if s.Linux.Seccomp != nil {
		t.Errorf("privileged container has a seccomp filter")
	}
	if s.Linux.MaskedPaths != nil || s.Linux.ReadonlyPaths != nil {
		t.Errorf("privileged container has masked %v / read-only %v paths", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
	}
	for _, m := range s.Mounts {
		if (m.Destination == "/sys" || m.Destination == "/sys/fs/cgroup") && !slices.Contains(m.Options, "rw") {
			t.Errorf("privileged %s mount options %v, want rw", m.Destination, m.Options)
		}
	}
	if want := []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}; !reflect.DeepEqual(s.Linux.Resources.Devices, want) {
		t.Errorf("device rules = %+v, want allow all", s.Linux.Resources.Devices)
	}
	if !slices.ContainsFunc(s.Linux.Devices, func(d specs.LinuxDevice) bool { return d.Path == "/dev/null" }) {
		t.Errorf("privileged container lacks the host's /dev/null among %d devices", len(s.Linux.Devices))
	}
	if slices.ContainsFunc(s.Linux.Devices, func(d specs.LinuxDevice) bool { return strings.HasPrefix(d.Path, "/dev/pts/") }) {
		t.Errorf("privileged container got the host's pts nodes")
	}
}

func TestUnprivilegedSpecDefaults(t *testing.T) {
	s := mustGenerate(t, minimalSpec(t), testHost())
	if !slices.Equal(s.Linux.MaskedPaths, DefaultMaskedPaths) || !slices.Equal(s.Linux.ReadonlyPaths, DefaultReadonlyPaths) {
		t.Errorf("masked %v, read-only %v: want the defaults", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
	}
	for _, m := range s.Mounts {
		if (m.Destination == "/sys" || m.Destination == "/sys/fs/cgroup") && !slices.Contains(m.Options, "ro") {
			t.Errorf("%s mount options %v, want ro", m.Destination, m.Options)
		}
	}
	rules := s.Linux.Resources.Devices
	if len(rules) == 0 || rules[0].Allow || rules[0].Access != "rwm" {
		t.Errorf("device rules do not start with deny-all: %+v", rules)
	}
	if s.Linux.Seccomp != nil || s.Process.ApparmorProfile != "" || s.Process.NoNewPrivileges {
		t.Errorf("unconfined by default expected: seccomp %v apparmor %q nnp %v", s.Linux.Seccomp != nil, s.Process.ApparmorProfile, s.Process.NoNewPrivileges)
	}
	if s.Version != specVersion || s.Process.Cwd != "/" || s.Linux.CgroupsPath != "/pod/abc" {
		t.Errorf("version %q cwd %q cgroups path %q", s.Version, s.Process.Cwd, s.Linux.CgroupsPath)
	}
}

func TestMaskedAndReadonlyPaths(t *testing.T) {
	tests := []struct {
		name                   string
		masked, readonly       []string
		wantMasked, wantRdonly []string
	}{
		{name: "nil means defaults", wantMasked: DefaultMaskedPaths, wantRdonly: DefaultReadonlyPaths},
		{name: "empty means none", masked: []string{}, readonly: []string{}, wantMasked: []string{}, wantRdonly: []string{}},
		{name: "given replace defaults", masked: []string{"/proc/x"}, readonly: []string{"/proc/y"}, wantMasked: []string{"/proc/x"}, wantRdonly: []string{"/proc/y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := minimalSpec(t)
			c.Security.MaskedPaths, c.Security.ReadonlyPaths = tt.masked, tt.readonly
			s := mustGenerate(t, c, testHost())
			if !slices.Equal(s.Linux.MaskedPaths, tt.wantMasked) || !slices.Equal(s.Linux.ReadonlyPaths, tt.wantRdonly) {
				t.Errorf("masked %v read-only %v, want %v %v", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths, tt.wantMasked, tt.wantRdonly)
			}
		})
	}
}

func TestNamespaces(t *testing.T) {
	v2 := testHost()
	v2.cgroup2 = true
	pod := func(kind string) Namespace { return Namespace{Mode: NamespaceJoin, Path: "/run/netns/" + kind} }
	tests := []struct {
		name         string
		ns           Namespaces
		host         hostFacts
		want         []specs.LinuxNamespace
		wantHostname bool
		wantErr      bool
	}{
		{
			name: "all new on cgroup v1",
			want: []specs.LinuxNamespace{{Type: "mount"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"}, {Type: "pid"}},
			host: testHost(), wantHostname: true,
		},
		{
			name: "cgroup namespace on v2",
			want: []specs.LinuxNamespace{{Type: "mount"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"}, {Type: "pid"}, {Type: "cgroup"}},
			host: v2, wantHostname: true,
		},
		{
			name: "pod namespaces joined, pid of the pod's infra process",
			ns:   Namespaces{Network: pod("net"), IPC: pod("ipc"), UTS: pod("uts"), PID: Namespace{Mode: NamespaceJoin, Path: "/proc/42/ns/pid"}},
			want: []specs.LinuxNamespace{{Type: "mount"}, {Type: "network", Path: "/run/netns/net"}, {Type: "ipc", Path: "/run/netns/ipc"}, {Type: "uts", Path: "/run/netns/uts"}, {Type: "pid", Path: "/proc/42/ns/pid"}},
			host: testHost(), wantHostname: true,
		},
		{
			name: "host namespaces are left out, and so is the hostname",
			ns:   Namespaces{Network: Namespace{Mode: NamespaceHost}, IPC: Namespace{Mode: NamespaceHost}, UTS: Namespace{Mode: NamespaceHost}, PID: Namespace{Mode: NamespaceHost}},
			want: []specs.LinuxNamespace{{Type: "mount"}},
			host: testHost(),
		},
		{name: "relative join path", ns: Namespaces{Network: Namespace{Mode: NamespaceJoin, Path: "netns"}}, host: testHost(), wantErr: true},
		{name: "unknown mode", ns: Namespaces{PID: Namespace{Mode: 9}}, host: testHost(), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := minimalSpec(t)
			c.Namespaces, c.Hostname = tt.ns, "pod-host"
			s, err := generateSpec(&c, tt.host)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("err = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(s.Linux.Namespaces, tt.want) {
				t.Errorf("namespaces = %+v, want %+v", s.Linux.Namespaces, tt.want)
			}
			if got := s.Hostname == "pod-host"; got != tt.wantHostname {
				t.Errorf("hostname = %q, want set: %v", s.Hostname, tt.wantHostname)
			}
		})
	}
}

func TestCgroupsPath(t *testing.T) {
	tests := []struct {
		parent string
		driver CgroupDriver
		want   string
		ok     bool
	}{
		{"/kubepods/besteffort/pod1", CgroupfsDriver, "/kubepods/besteffort/pod1/abc", true},
		{"kubepods/pod1", "", "/kubepods/pod1/abc", true},
		{"", CgroupfsDriver, "/abc", true},
		{"kubepods-besteffort-pod1.slice", SystemdDriver, "kubepods-besteffort-pod1.slice:minicri:abc", true},
		// The kubelet's systemd driver sends the whole path (v1.37.2).
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1_2.slice", SystemdDriver, "kubepods-besteffort-pod1_2.slice:minicri:abc", true},
		{"/kubepods.slice/kubepods-pod1.slice", SystemdDriver, "kubepods-pod1.slice:minicri:abc", true},
		{"kubepods.slice/kubepods-pod1.slice", SystemdDriver, "kubepods-pod1.slice:minicri:abc", true},
		{"/kubepods.slice", SystemdDriver, "kubepods.slice:minicri:abc", true},
		{"", SystemdDriver, "system.slice:minicri:abc", true},
		{"/kubepods/pod1", SystemdDriver, "", false},
		// A path that is not where systemd puts its last slice.
		{"/system.slice/kubepods-pod1.slice", SystemdDriver, "", false},
		{"/kubepods.slice/../kubepods-pod1.slice", SystemdDriver, "", false},
		{"/kubepods.slice/kubepods-pod1.slice/", SystemdDriver, "", false},
		{"/kubepods.slice//kubepods-pod1.slice", SystemdDriver, "", false},
		{"..slice", SystemdDriver, "", false},
		{"a:b.slice", SystemdDriver, "", false},
		{"a b.slice", SystemdDriver, "", false},
		{"kubepods.slice", CgroupfsDriver, "", false},
		{"/pod", "cgroupv3", "", false},
	}
	for _, tt := range tests {
		got, err := CgroupsPath(tt.parent, "abc", tt.driver)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("CgroupsPath(%q, %q) = %q, %v; want %q, ok %v", tt.parent, tt.driver, got, err, tt.want, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("CgroupsPath(%q, %q) error %v is not ErrInvalid", tt.parent, tt.driver, err)
		}
	}
}

func TestOOMScoreAdjIsClampedToTheDaemons(t *testing.T) {
	tests := []struct {
		name     string
		want     int64
		daemon   int
		expected int
	}{
		{name: "guaranteed pod below the daemon", want: -997, daemon: 0, expected: 0},
		{name: "burstable above the daemon", want: 500, daemon: 0, expected: 500},
		{name: "daemon lower still allows its own", want: -999, daemon: -500, expected: -500},
		{name: "above the daemon when it is negative", want: -100, daemon: -500, expected: -100},
		{name: "capped at 1000", want: 1500, daemon: 0, expected: 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := testHost()
			h.oomScoreAdj = tt.daemon
			c := minimalSpec(t)
			c.Resources = &Resources{OomScoreAdj: tt.want}
			s := mustGenerate(t, c, h)
			if s.Process.OOMScoreAdj == nil || *s.Process.OOMScoreAdj != tt.expected {
				t.Errorf("oomScoreAdj = %v, want %d", s.Process.OOMScoreAdj, tt.expected)
			}
		})
	}
	if s := mustGenerate(t, minimalSpec(t), testHost()); s.Process.OOMScoreAdj != nil {
		t.Errorf("no resources: oomScoreAdj = %d, want unset (inherited)", *s.Process.OOMScoreAdj)
	}
}

func TestRlimits(t *testing.T) {
	tests := []struct {
		name       string
		daemonHard uint64
		given      []specs.POSIXRlimit
		want       []specs.POSIXRlimit
	}{
		{name: "default", daemonHard: 1 << 24, want: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1048576, Soft: 1048576}}},
		{name: "lowered to the daemon's hard limit", daemonHard: 20000, want: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 20000, Soft: 20000}}},
		{name: "given replace the default", daemonHard: 20000, given: []specs.POSIXRlimit{{Type: "RLIMIT_NPROC", Hard: 10, Soft: 5}}, want: []specs.POSIXRlimit{{Type: "RLIMIT_NPROC", Hard: 10, Soft: 5}}},
		{name: "empty given means none", daemonHard: 20000, given: []specs.POSIXRlimit{}, want: []specs.POSIXRlimit{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := testHost()
			h.nofileHard = tt.daemonHard
			c := minimalSpec(t)
			c.Rlimits = tt.given
			s := mustGenerate(t, c, h)
			if !reflect.DeepEqual(s.Process.Rlimits, tt.want) {
				t.Errorf("rlimits = %+v, want %+v", s.Process.Rlimits, tt.want)
			}
		})
	}
}

func TestResources(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	u64 := func(v uint64) *uint64 { return &v }
	noSwap := testHost()
	noSwap.swapAccounting = false
	v2 := testHost()
	v2.cgroup2 = true
	noHugetlb := testHost()
	noHugetlb.hugetlb = false
	tests := []struct {
		name    string
		r       *Resources
		host    hostFacts
		check   func(t *testing.T, r *specs.LinuxResources)
		wantErr bool
	}{
		{name: "nothing set", r: &Resources{}, host: testHost(), check: func(t *testing.T, r *specs.LinuxResources) {
			if r.CPU != nil || r.Memory != nil || r.Pids != nil || r.HugepageLimits != nil {
				t.Errorf("limits set from zero resources: %+v", r)
			}
		}},
		{name: "cpu", r: &Resources{CPUShares: 512, CPUQuota: 50000, CPUPeriod: 100000, CpusetCpus: "0-1", CpusetMems: "0"}, host: testHost(), check: func(t *testing.T, r *specs.LinuxResources) {
			want := &specs.LinuxCPU{Shares: u64(512), Quota: i64(50000), Period: u64(100000), Cpus: "0-1", Mems: "0"}
			if !reflect.DeepEqual(r.CPU, want) {
				t.Errorf("cpu = %+v, want %+v", r.CPU, want)
			}
		}},
		{name: "memory without swap limit gets swap = limit", r: &Resources{MemoryLimitBytes: 64 << 20}, host: testHost(), check: func(t *testing.T, r *specs.LinuxResources) {
			if want := (&specs.LinuxMemory{Limit: i64(64 << 20), Swap: i64(64 << 20)}); !reflect.DeepEqual(r.Memory, want) {
				t.Errorf("memory = %+v, want %+v", r.Memory, want)
			}
		}},
		{name: "explicit swap limit", r: &Resources{MemoryLimitBytes: 64 << 20, MemorySwapLimitBytes: 128 << 20}, host: testHost(), check: func(t *testing.T, r *specs.LinuxResources) {
			if *r.Memory.Swap != 128<<20 {
				t.Errorf("swap = %d, want %d", *r.Memory.Swap, 128<<20)
			}
		}},
		{name: "no swap accounting, no swap limit", r: &Resources{MemoryLimitBytes: 64 << 20}, host: noSwap, check: func(t *testing.T, r *specs.LinuxResources) {
			if r.Memory.Swap != nil {
				t.Errorf("swap = %d on a host without swap accounting", *r.Memory.Swap)
			}
		}},
		{name: "pids and hugepages", r: &Resources{PidsLimit: 100, HugepageLimits: []HugepageLimit{{PageSize: "2MB", Limit: 4 << 20}}}, host: testHost(), check: func(t *testing.T, r *specs.LinuxResources) {
			if r.Pids == nil || *r.Pids.Limit != 100 {
				t.Errorf("pids = %+v, want 100", r.Pids)
			}
			if want := []specs.LinuxHugepageLimit{{Pagesize: "2MB", Limit: 4 << 20}}; !reflect.DeepEqual(r.HugepageLimits, want) {
				t.Errorf("hugepages = %+v, want %+v", r.HugepageLimits, want)
			}
		}},
		{name: "no hugetlb controller: hugepage limits skipped", r: &Resources{HugepageLimits: []HugepageLimit{{PageSize: "2MB"}, {PageSize: "1GB"}}}, host: noHugetlb, check: func(t *testing.T, r *specs.LinuxResources) {
			if r.HugepageLimits != nil {
				t.Errorf("hugepages = %+v on a host without the hugetlb controller; runc would fail the create", r.HugepageLimits)
			}
		}},
		{name: "no swap accounting: explicit swap limit skipped", r: &Resources{MemoryLimitBytes: 64 << 20, MemorySwapLimitBytes: 128 << 20}, host: noSwap, check: func(t *testing.T, r *specs.LinuxResources) {
			if r.Memory.Swap != nil || *r.Memory.Limit != 64<<20 {
				t.Errorf("memory = %+v, want the limit alone on a host without swap accounting", r.Memory)
			}
		}},
		{name: "unified on v2", r: &Resources{Unified: map[string]string{"memory.high": "1000000"}}, host: v2, check: func(t *testing.T, r *specs.LinuxResources) {
			if r.Unified["memory.high"] != "1000000" {
				t.Errorf("unified = %v", r.Unified)
			}
		}},
		{name: "unified on v1 is refused", r: &Resources{Unified: map[string]string{"memory.high": "1"}}, host: testHost(), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := minimalSpec(t)
			c.Resources = tt.r
			s, err := generateSpec(&c, tt.host)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("err = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, s.Linux.Resources)
		})
	}
}

func TestProcessEnvUserAndCwd(t *testing.T) {
	c := minimalSpec(t)
	c.Env = []string{"PATH=/bin", "A=1"}
	c.Hostname = "web-1"
	c.Cwd = "/srv"
	c.Terminal = true
	c.User = User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 5}, Home: "/home/app"}
	s := mustGenerate(t, c, testHost())
	if want := []string{"PATH=/bin", "A=1", "HOSTNAME=web-1", "HOME=/home/app"}; !slices.Equal(s.Process.Env, want) {
		t.Errorf("env = %q, want %q", s.Process.Env, want)
	}
	if want := (specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 5}}); !reflect.DeepEqual(s.Process.User, want) {
		t.Errorf("user = %+v, want %+v", s.Process.User, want)
	}
	if s.Process.Cwd != "/srv" || !s.Process.Terminal || s.Hostname != "web-1" {
		t.Errorf("cwd %q terminal %v hostname %q", s.Process.Cwd, s.Process.Terminal, s.Hostname)
	}

	c.Env = []string{"HOSTNAME=mine", "HOME=/data"}
	s = mustGenerate(t, c, testHost())
	if want := []string{"HOSTNAME=mine", "HOME=/data"}; !slices.Equal(s.Process.Env, want) {
		t.Errorf("env = %q, want the container's own HOSTNAME and HOME kept: %q", s.Process.Env, want)
	}
}

func TestSysctlsAndAnnotationsAreCopied(t *testing.T) {
	c := minimalSpec(t)
	c.Sysctls = map[string]string{"net.ipv4.ip_forward": "1"}
	c.Annotations = map[string]string{"io.kubernetes.pod.name": "p"}
	s := mustGenerate(t, c, testHost())
	c.Sysctls["net.ipv4.ip_forward"] = "0"
	c.Annotations["io.kubernetes.pod.name"] = "changed"
	if s.Linux.Sysctl["net.ipv4.ip_forward"] != "1" || s.Annotations["io.kubernetes.pod.name"] != "p" {
		t.Errorf("spec shares maps with its input: sysctl %v annotations %v", s.Linux.Sysctl, s.Annotations)
	}
}

func TestGenerateSpecValidates(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(c *ContainerSpec)
		wantErr error
	}{
		{"empty ID", func(c *ContainerSpec) { c.ID = "" }, ErrInvalid},
		{"ID with a slash", func(c *ContainerSpec) { c.ID = "../x" }, ErrInvalid},
		{"relative rootfs", func(c *ContainerSpec) { c.Rootfs = "rootfs" }, ErrInvalid},
		{"no args", func(c *ContainerSpec) { c.Args = nil }, ErrNoCommand},
		{"relative cwd", func(c *ContainerSpec) { c.Cwd = "srv" }, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := minimalSpec(t)
			tt.mutate(&c)
			if _, err := GenerateSpec(c); !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestAppArmor(t *testing.T) {
	profiles := filepath.Join(t.TempDir(), "profiles")
	if err := os.WriteFile(profiles, []byte("minicri-default (enforce)\nmy-profile (complain)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	withAppArmor := testHost()
	withAppArmor.apparmor, withAppArmor.appArmorProfiles = true, profiles
	tests := []struct {
		name    string
		host    hostFacts
		sec     Security
		want    string
		wantErr bool
	}{
		{name: "ignored without AppArmor", host: testHost(), sec: Security{AppArmor: AppArmorProfile{Type: ProfileLocalhost, LocalhostName: "nope"}}},
		{name: "no profile without AppArmor", host: testHost()},
		{name: "no profile named gets the default", host: withAppArmor, want: DefaultAppArmorProfile},
		{name: "unconfined", host: withAppArmor, sec: Security{AppArmor: AppArmorProfile{Type: ProfileUnconfined}}},
		{name: "runtime default", host: withAppArmor, sec: Security{AppArmor: AppArmorProfile{Type: ProfileRuntimeDefault}}, want: DefaultAppArmorProfile},
		{name: "privileged runtime default is unconfined", host: withAppArmor, sec: Security{Privileged: true, AppArmor: AppArmorProfile{Type: ProfileRuntimeDefault}}},
		{name: "privileged without a profile is unconfined", host: withAppArmor, sec: Security{Privileged: true}},
		{name: "localhost", host: withAppArmor, sec: Security{AppArmor: AppArmorProfile{Type: ProfileLocalhost, LocalhostName: "localhost/my-profile"}}, want: "my-profile"},
		{name: "localhost not loaded", host: withAppArmor, sec: Security{AppArmor: AppArmorProfile{Type: ProfileLocalhost, LocalhostName: "other"}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := minimalSpec(t)
			c.Security = tt.sec
			s, err := generateSpec(&c, tt.host)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "other") {
					t.Fatalf("err = %v, want ErrInvalid naming the profile", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Process.ApparmorProfile != tt.want {
				t.Errorf("apparmor = %q, want %q", s.Process.ApparmorProfile, tt.want)
			}
		})
	}
}

func TestWriteSpecIsAtomicAndReadable(t *testing.T) {
	dir := t.TempDir()
	s := mustGenerate(t, minimalSpec(t), testHost())
	if err := os.WriteFile(filepath.Join(dir, SpecFile), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteSpec(dir, s); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSpec(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("read back spec differs from the written one")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("bundle holds %d entries, want only %s (temp files left?)", len(entries), SpecFile)
	}
	if err := WriteSpec(filepath.Join(dir, "missing"), s); err == nil {
		t.Errorf("WriteSpec into a missing directory succeeded")
	}
}

func TestMissingControllers(t *testing.T) {
	bare := testHost()
	bare.hugetlb, bare.swapAccounting = false, false
	hugepages := []HugepageLimit{{PageSize: "2MB"}}
	tests := []struct {
		name string
		r    *Resources
		host hostFacts
		want []string
	}{
		{"nil resources", nil, bare, nil},
		{"nothing asked", &Resources{MemoryLimitBytes: 1 << 20}, bare, nil},
		{"hugepages on a host with hugetlb", &Resources{HugepageLimits: hugepages}, testHost(), nil},
		{"hugepages without hugetlb", &Resources{HugepageLimits: hugepages}, bare, []string{"hugetlb"}},
		{"swap without accounting", &Resources{MemoryLimitBytes: 1 << 20, MemorySwapLimitBytes: 2 << 20}, bare, []string{"memory swap"}},
		{"both", &Resources{HugepageLimits: hugepages, MemoryLimitBytes: 1 << 20, MemorySwapLimitBytes: 2 << 20}, bare, []string{"hugetlb", "memory swap"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := missingControllers(tt.r, tt.host); !slices.Equal(got, tt.want) {
				t.Errorf("missingControllers = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestV1Controllers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cgroup")
	data := "9:name=systemd:/\n4:memory:/x\n1:cpu,cpuacct:/\n0::/\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	got := v1Controllers(path)
	for _, want := range []string{"memory", "cpu", "cpuacct"} {
		if !slices.Contains(got, want) {
			t.Errorf("v1Controllers = %q, want it to hold %q", got, want)
		}
	}
	if slices.Contains(got, "hugetlb") || slices.Contains(got, "") {
		t.Errorf("v1Controllers = %q: an unmounted or empty controller listed", got)
	}
}
