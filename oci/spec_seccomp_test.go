package oci

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func TestSeccompProfileChoice(t *testing.T) {
	dir := t.TempDir()
	valid := filepath.Join(dir, "valid.json")
	writeFile(t, valid, `{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64"],"syscalls":[{"names":["read","write"],"action":"SCMP_ACT_ALLOW"}]}`)
	broken := filepath.Join(dir, "broken.json")
	writeFile(t, broken, `{"defaultAction":`)
	badAction := filepath.Join(dir, "bad-action.json")
	writeFile(t, badAction, `{"defaultAction":"SCMP_ACT_MAYBE"}`)

	tests := []struct {
		name    string
		sec     Security
		check   func(t *testing.T, p *specs.LinuxSeccomp)
		wantErr string
	}{
		{name: "unconfined", sec: Security{}, check: func(t *testing.T, p *specs.LinuxSeccomp) {
			if p != nil {
				t.Errorf("profile set for Unconfined")
			}
		}},
		{name: "runtime default", sec: Security{Seccomp: SeccompProfile{Type: ProfileRuntimeDefault}}, check: func(t *testing.T, p *specs.LinuxSeccomp) {
			if p == nil || p.DefaultAction != specs.ActErrno || seccompAllows(p, "mount") {
				t.Errorf("RuntimeDefault = %+v, want an allow list with mount refused", p)
			}
		}},
		{name: "localhost", sec: Security{Seccomp: SeccompProfile{Type: ProfileLocalhost, LocalhostPath: valid}}, check: func(t *testing.T, p *specs.LinuxSeccomp) {
			if p == nil || p.DefaultAction != specs.ActErrno || len(p.Syscalls) != 1 || !slices.Equal(p.Syscalls[0].Names, []string{"read", "write"}) {
				t.Errorf("Localhost = %+v, want the file's profile", p)
			}
		}},
		{name: "privileged ignores the profile", sec: Security{Privileged: true, Seccomp: SeccompProfile{Type: ProfileLocalhost, LocalhostPath: valid}}, check: func(t *testing.T, p *specs.LinuxSeccomp) {
			if p != nil {
				t.Errorf("privileged container got a seccomp profile")
			}
		}},
		{name: "localhost missing file", sec: Security{Seccomp: SeccompProfile{Type: ProfileLocalhost, LocalhostPath: filepath.Join(dir, "nope.json")}}, wantErr: "nope.json"},
		{name: "localhost invalid JSON", sec: Security{Seccomp: SeccompProfile{Type: ProfileLocalhost, LocalhostPath: broken}}, wantErr: broken},
		{name: "localhost unknown action", sec: Security{Seccomp: SeccompProfile{Type: ProfileLocalhost, LocalhostPath: badAction}}, wantErr: "SCMP_ACT_MAYBE"},
		{name: "localhost relative path", sec: Security{Seccomp: SeccompProfile{Type: ProfileLocalhost, LocalhostPath: "profile.json"}}, wantErr: "profile.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := minimalSpec(t)
			c.Security = tt.sec
			s, err := generateSpec(&c, testHost())
			if tt.wantErr != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrInvalid naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, s.Linux.Seccomp)
		})
	}
}

// seccompVerdict is what profile p does to a call of name with args, the
// way the kernel filter that runc builds from it decides: the first rule for
// the name whose argument conditions all hold, else the default action. The
// errno is that of the rule, or the default one.
func seccompVerdict(p *specs.LinuxSeccomp, name string, args ...uint64) (specs.LinuxSeccompAction, uint) {
	for _, sc := range p.Syscalls {
		if !slices.Contains(sc.Names, name) || !argsHold(sc.Args, args) {
			continue
		}
		if sc.ErrnoRet != nil {
			return sc.Action, *sc.ErrnoRet
		}
		return sc.Action, errnoOf(p.DefaultErrnoRet)
	}
	return p.DefaultAction, errnoOf(p.DefaultErrnoRet)
}

func errnoOf(e *uint) uint {
	if e == nil {
		return uint(unix.EPERM) // runc's errno when a profile names none
	}
	return *e
}

func argsHold(conds []specs.LinuxSeccompArg, args []uint64) bool {
	for _, c := range conds {
		var v uint64
		if int(c.Index) < len(args) {
			v = args[c.Index]
		}
		var ok bool
		switch c.Op {
		case specs.OpEqualTo:
			ok = v == c.Value
		case specs.OpNotEqual:
			ok = v != c.Value
		case specs.OpLessThan:
			ok = v < c.Value
		case specs.OpLessEqual:
			ok = v <= c.Value
		case specs.OpGreaterThan:
			ok = v > c.Value
		case specs.OpGreaterEqual:
			ok = v >= c.Value
		case specs.OpMaskedEqual:
			ok = v&c.Value == c.ValueTwo
		default:
			panic("unknown seccomp operator " + string(c.Op))
		}
		if !ok {
			return false
		}
	}
	return true
}

func seccompAllows(p *specs.LinuxSeccomp, name string, args ...uint64) bool {
	action, _ := seccompVerdict(p, name, args...)
	return action == specs.ActAllow
}

func mustDefaultSeccomp(t *testing.T, caps capSet) *specs.LinuxSeccomp {
	t.Helper()
	p, err := defaultSeccompProfile(caps)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runc 1.1.5 (Debian 12) refuses a profile with an action or flag it does
// not know; `runc features` lists these.
var runc115SeccompActions = []specs.LinuxSeccompAction{
	specs.ActAllow, specs.ActErrno, specs.ActKill, specs.ActKillProcess, specs.ActKillThread,
	specs.ActLog, specs.ActNotify, specs.ActTrace, specs.ActTrap,
}

func TestDefaultSeccompProfileIsAnAllowList(t *testing.T) {
	p := mustDefaultSeccomp(t, capSetOf(DefaultCapabilities))
	if p.DefaultAction != specs.ActErrno || errnoOf(p.DefaultErrnoRet) != uint(unix.EPERM) {
		t.Errorf("default action %s errno %v, want SCMP_ACT_ERRNO with EPERM", p.DefaultAction, p.DefaultErrnoRet)
	}
	for _, name := range []string{"read", "write", "openat", "execve", "clone", "futex", "exit_group"} {
		if !seccompAllows(p, name) {
			t.Errorf("%s refused", name)
		}
	}
	if action, errno := seccompVerdict(p, "syscall_of_a_future_kernel"); action != specs.ActErrno || errno != uint(unix.EPERM) {
		t.Errorf("an unlisted syscall gets %s/%d, want SCMP_ACT_ERRNO/EPERM", action, errno)
	}
	if len(p.Flags) > 0 {
		t.Errorf("flags %v: runc 1.1.5 knows none", p.Flags)
	}
	for _, sc := range p.Syscalls {
		if !slices.Contains(runc115SeccompActions, sc.Action) {
			t.Errorf("rule %v: action %s unknown to runc 1.1.5", sc.Names, sc.Action)
		}
	}
	if goruntime.GOARCH == "amd64" {
		if want := []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}; !slices.Equal(p.Architectures, want) {
			t.Errorf("architectures = %v, want %v: 32-bit binaries must meet the same rules", p.Architectures, want)
		}
	}
}

func TestDefaultSeccompProfileChecksArguments(t *testing.T) {
	const (
		perLinux          = 0x0
		perLinux32        = 0x8
		addrNoRandomize   = 0x0040000
		readImpliesExec   = 0x0400000
		queryPersonality  = 0xffffffff
		cloneNewUser      = unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)
		plainFork         = uint64(unix.SIGCHLD)
		cloneThreadsFlags = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM
	)
	defaults := capSetOf(DefaultCapabilities)
	sysAdmin := defaults | capSetOf([]string{"CAP_SYS_ADMIN"})
	tests := []struct {
		name    string
		caps    capSet
		syscall string
		args    []uint64
		allowed bool
	}{
		{"personality(PER_LINUX)", defaults, "personality", []uint64{perLinux}, true},
		{"personality(PER_LINUX32)", defaults, "personality", []uint64{perLinux32}, true},
		{"personality query", defaults, "personality", []uint64{queryPersonality}, true},
		{"personality(ADDR_NO_RANDOMIZE)", defaults, "personality", []uint64{addrNoRandomize}, false},
		{"personality(READ_IMPLIES_EXEC)", defaults, "personality", []uint64{readImpliesExec}, false},
		{"socket(AF_UNIX)", defaults, "socket", []uint64{unix.AF_UNIX}, true},
		{"socket(AF_INET)", defaults, "socket", []uint64{unix.AF_INET}, true},
		{"socket(AF_INET6)", defaults, "socket", []uint64{unix.AF_INET6}, true},
		{"socket(AF_NETLINK)", defaults, "socket", []uint64{unix.AF_NETLINK}, true},
		{"socket(AF_VSOCK)", defaults, "socket", []uint64{unix.AF_VSOCK}, false},
		{"socket(AF_VSOCK) even with CAP_SYS_ADMIN", sysAdmin, "socket", []uint64{unix.AF_VSOCK}, false},
		{"socket(AF_ALG)", defaults, "socket", []uint64{unix.AF_ALG}, false},
		{"clone for a fork", defaults, "clone", []uint64{plainFork}, true},
		{"clone for a thread", defaults, "clone", []uint64{cloneThreadsFlags}, true},
		{"clone(CLONE_NEWUSER)", defaults, "clone", []uint64{cloneNewUser}, false},
		{"clone(CLONE_NEWUSER) with CAP_SYS_ADMIN", sysAdmin, "clone", []uint64{cloneNewUser}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := seccompAllows(mustDefaultSeccomp(t, tt.caps), tt.syscall, tt.args...); got != tt.allowed {
				t.Errorf("%s allowed = %v, want %v", tt.name, got, tt.allowed)
			}
		})
	}
	// clone3 keeps its flags in memory the filter cannot read: ENOSYS makes
	// libc fall back to clone, whose flags the rules above check.
	if action, errno := seccompVerdict(mustDefaultSeccomp(t, defaults), "clone3"); action != specs.ActErrno || errno != uint(unix.ENOSYS) {
		t.Errorf("clone3 without CAP_SYS_ADMIN: %s/%d, want SCMP_ACT_ERRNO/ENOSYS", action, errno)
	}
}

func TestDefaultSeccompProfileCapabilitiesAllowTheirSyscalls(t *testing.T) {
	tests := []struct {
		syscall string
		liftBy  string // "" when no capability allows it
	}{
		{"mount", "CAP_SYS_ADMIN"},
		{"unshare", "CAP_SYS_ADMIN"},
		{"setns", "CAP_SYS_ADMIN"},
		{"sethostname", "CAP_SYS_ADMIN"},
		{"bpf", "CAP_BPF"},
		{"perf_event_open", "CAP_PERFMON"},
		{"reboot", "CAP_SYS_BOOT"},
		{"init_module", "CAP_SYS_MODULE"},
		{"clock_settime", "CAP_SYS_TIME"},
		{"kcmp", "CAP_SYS_PTRACE"},
		{"acct", "CAP_SYS_PACCT"},
		{"open_by_handle_at", "CAP_DAC_READ_SEARCH"},
		{"get_mempolicy", "CAP_SYS_NICE"},
		{"set_mempolicy", "CAP_SYS_NICE"},
		{"mbind", "CAP_SYS_NICE"},
		{"iopl", "CAP_SYS_RAWIO"},
		{"syslog", "CAP_SYSLOG"},
		{"keyctl", ""},
		{"add_key", ""},
		{"io_uring_setup", ""},
		{"userfaultfd", ""},
	}
	defaults := capSetOf(DefaultCapabilities)
	for _, tt := range tests {
		t.Run(tt.syscall, func(t *testing.T) {
			if seccompAllows(mustDefaultSeccomp(t, defaults), tt.syscall) {
				t.Errorf("%s allowed with the default capabilities", tt.syscall)
			}
			if tt.liftBy == "" {
				if seccompAllows(mustDefaultSeccomp(t, ^capSet(0)), tt.syscall) {
					t.Errorf("%s allowed with every capability; nothing should allow it", tt.syscall)
				}
				return
			}
			if !seccompAllows(mustDefaultSeccomp(t, defaults|capSetOf([]string{tt.liftBy})), tt.syscall) {
				t.Errorf("%s still refused with %s", tt.syscall, tt.liftBy)
			}
		})
	}
}

// Docker's profile format: archMap and conditional rules.
func TestLocalhostSeccompDockerForm(t *testing.T) {
	profile := `{
	  "defaultAction": "SCMP_ACT_ERRNO",
	  "defaultErrnoRet": 1,
	  "archMap": [
	    {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
	    {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]}
	  ],
	  "syscalls": [
	    {"names": ["read"], "action": "SCMP_ACT_ALLOW", "comment": "always"},
	    {"name": "write", "action": "SCMP_ACT_ALLOW"},
	    {"names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
	    {"names": ["chown"], "action": "SCMP_ACT_ALLOW", "excludes": {"caps": ["CAP_CHOWN"]}},
	    {"names": ["arch_prctl"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["amd64"]}},
	    {"names": ["newfeature"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "99.0"}},
	    {"names": ["oldfeature"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "4.8"}}
	  ]
	}`
	path := filepath.Join(t.TempDir(), "docker.json")
	writeFile(t, path, profile)
	var f seccompFile
	data, _ := os.ReadFile(path)
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	p, err := f.toSpec(capSetOf(DefaultCapabilities), "amd64", "6.1.0-18-amd64")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sc := range p.Syscalls {
		names = append(names, sc.Names...)
	}
	if want := []string{"read", "write", "arch_prctl", "oldfeature"}; !slices.Equal(names, want) {
		t.Errorf("applied syscalls = %v, want %v", names, want)
	}
	if want := []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}; !slices.Equal(p.Architectures, want) {
		t.Errorf("architectures = %v, want %v", p.Architectures, want)
	}
	if p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != 1 {
		t.Errorf("defaultErrnoRet lost")
	}

	p, err = f.toSpec(capSetOf([]string{"CAP_SYS_ADMIN"}), "arm64", "5.4")
	if err != nil {
		t.Fatal(err)
	}
	names = nil
	for _, sc := range p.Syscalls {
		names = append(names, sc.Names...)
	}
	if want := []string{"read", "write", "mount", "chown", "oldfeature"}; !slices.Equal(names, want) {
		t.Errorf("arm64 with CAP_SYS_ADMIN: applied syscalls = %v, want %v", names, want)
	}
	if want := []specs.Arch{specs.ArchAARCH64, specs.ArchARM}; !slices.Equal(p.Architectures, want) {
		t.Errorf("arm64 architectures = %v, want %v", p.Architectures, want)
	}
}

func TestKernelAtLeast(t *testing.T) {
	tests := []struct {
		release, want string
		ok            bool
	}{
		{"6.18.44-fc", "4.8", true},
		{"4.8.0", "4.8", true},
		{"4.7.10", "4.8", false},
		{"5.10-rc1", "5.10", true},
		{"3.10.0", "4.0", false},
		{"weird", "4.0", true},
	}
	for _, tt := range tests {
		if got := kernelAtLeast(tt.release, tt.want); got != tt.ok {
			t.Errorf("kernelAtLeast(%q, %q) = %v, want %v", tt.release, tt.want, got, tt.ok)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
