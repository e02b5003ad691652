package oci

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// deniedNames lists the syscalls a profile refuses without argument
// conditions.
func deniedNames(p *specs.LinuxSeccomp) []string {
	var out []string
	for _, sc := range p.Syscalls {
		if sc.Action == specs.ActErrno && len(sc.Args) == 0 {
			out = append(out, sc.Names...)
		}
	}
	return out
}

func hasCloneNamespaceRule(p *specs.LinuxSeccomp) bool {
	return slices.ContainsFunc(p.Syscalls, func(sc specs.LinuxSyscall) bool {
		return slices.Equal(sc.Names, []string{"clone"}) && len(sc.Args) == 1
	})
}

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
			if p == nil || p.DefaultAction != specs.ActAllow || !slices.Contains(deniedNames(p), "mount") {
				t.Errorf("RuntimeDefault = %+v, want default allow with mount denied", p)
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

func TestDefaultSeccompProfileLiftsDenialsWithCapabilities(t *testing.T) {
	tests := []struct {
		syscall string
		liftBy  string // "" when no capability lifts the denial
	}{
		{"mount", "CAP_SYS_ADMIN"},
		{"unshare", "CAP_SYS_ADMIN"},
		{"setns", "CAP_SYS_ADMIN"},
		{"bpf", "CAP_BPF"},
		{"perf_event_open", "CAP_PERFMON"},
		{"reboot", "CAP_SYS_BOOT"},
		{"kexec_load", "CAP_SYS_BOOT"},
		{"init_module", "CAP_SYS_MODULE"},
		{"clock_settime", "CAP_SYS_TIME"},
		{"ptrace", "CAP_SYS_PTRACE"},
		{"acct", "CAP_SYS_PACCT"},
		{"open_by_handle_at", "CAP_DAC_READ_SEARCH"},
		{"swapon", "CAP_SYS_ADMIN"},
		{"keyctl", ""},
		{"add_key", ""},
		{"io_uring_setup", ""},
	}
	defaults := capSetOf(DefaultCapabilities)
	for _, tt := range tests {
		t.Run(tt.syscall, func(t *testing.T) {
			if !slices.Contains(deniedNames(defaultSeccompProfile(defaults)), tt.syscall) {
				t.Errorf("%s allowed with the default capabilities", tt.syscall)
			}
			if tt.liftBy == "" {
				if !slices.Contains(deniedNames(defaultSeccompProfile(^capSet(0))), tt.syscall) {
					t.Errorf("%s allowed with every capability; nothing should lift it", tt.syscall)
				}
				return
			}
			lifted := defaults | capSetOf([]string{tt.liftBy})
			if slices.Contains(deniedNames(defaultSeccompProfile(lifted)), tt.syscall) {
				t.Errorf("%s still denied with %s", tt.syscall, tt.liftBy)
			}
		})
	}
}

func TestDefaultSeccompProfileShape(t *testing.T) {
	p := defaultSeccompProfile(capSetOf(DefaultCapabilities))
	if !hasCloneNamespaceRule(p) {
		t.Errorf("clone with namespace flags not refused without CAP_SYS_ADMIN")
	}
	if hasCloneNamespaceRule(defaultSeccompProfile(capSetOf(append(slices.Clone(DefaultCapabilities), "CAP_SYS_ADMIN")))) {
		t.Errorf("clone with namespace flags refused despite CAP_SYS_ADMIN")
	}
	for _, sc := range p.Syscalls {
		if sc.ErrnoRet == nil {
			t.Errorf("rule %v has no errno: the runtime's default would kill", sc.Names)
		}
		if slices.Contains(sc.Names, "clone3") && *sc.ErrnoRet != 38 {
			t.Errorf("clone3 errno %d, want ENOSYS so that libc falls back to clone", *sc.ErrnoRet)
		}
	}
	if want := seccompArchitectures("amd64"); !slices.Equal(want, []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}) {
		t.Errorf("amd64 architectures = %v", want)
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
