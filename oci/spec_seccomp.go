package oci

import (
	"fmt"
	"runtime"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The RuntimeDefault profile allows every syscall and refuses a named list.
//
// Why default-allow: a default-deny allow list must track every syscall each
// new kernel and libc adds (clone3, faccessat2, openat2 and rseq each broke
// containers under stale allow lists), while what needs denying is a short,
// stable list: interfaces that are not namespaced (keyrings, the clock, kernel
// modules, swap, reboot), that escape or reshape the sandbox (mount, pivot_root,
// namespaces), that inspect other processes (ptrace and relatives), and large
// attack surfaces containers do not need (bpf, perf_event_open, io_uring).
// The kernel already checks capabilities for most of these; the filter is the
// second wall when a kernel bug makes the first one fail, which is why a denial
// is lifted only when the container holds the capability that the syscall's
// legitimate use needs, as Docker's profile does.
//
// The cost: a dangerous syscall added by a future kernel is allowed until it is
// listed here.

// seccompDenial refuses names unless the container holds one of unlessCaps.
type seccompDenial struct {
	names      []string
	unlessCaps []string
	errno      uint
}

var seccompDenials = []seccompDenial{
	// Not namespaced, and rarely needed: no capability lifts these.
	{names: []string{"keyctl", "add_key", "request_key"}},
	{names: []string{"io_uring_setup", "io_uring_enter", "io_uring_register"}},
	{names: []string{"uselib", "nfsservctl", "_sysctl", "vm86", "vm86old"}},

	{names: []string{
		"mount", "umount", "umount2", "pivot_root", "unshare", "setns",
		"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
		"mount_setattr", "quotactl", "quotactl_fd", "swapon", "swapoff",
		"fanotify_init", "lookup_dcookie",
	}, unlessCaps: []string{"CAP_SYS_ADMIN"}},
	// clone3 passes its flags in memory a filter cannot read: answering ENOSYS
	// makes libc fall back to clone, whose flags the rules below check.
	{names: []string{"clone3"}, unlessCaps: []string{"CAP_SYS_ADMIN"}, errno: uint(unix.ENOSYS)},
	{names: []string{"bpf"}, unlessCaps: []string{"CAP_SYS_ADMIN", "CAP_BPF"}},
	{names: []string{"perf_event_open"}, unlessCaps: []string{"CAP_SYS_ADMIN", "CAP_PERFMON"}},

	{names: []string{"reboot", "kexec_load", "kexec_file_load"}, unlessCaps: []string{"CAP_SYS_BOOT"}},
	{names: []string{"init_module", "finit_module", "delete_module"}, unlessCaps: []string{"CAP_SYS_MODULE"}},
	{names: []string{"settimeofday", "stime", "clock_settime", "clock_settime64"}, unlessCaps: []string{"CAP_SYS_TIME"}},
	{names: []string{
		"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
		"process_madvise", "userfaultfd",
	}, unlessCaps: []string{"CAP_SYS_PTRACE"}},
	{names: []string{"acct"}, unlessCaps: []string{"CAP_SYS_PACCT"}},
	{names: []string{"open_by_handle_at"}, unlessCaps: []string{"CAP_DAC_READ_SEARCH"}},
	{names: []string{"iopl", "ioperm"}, unlessCaps: []string{"CAP_SYS_RAWIO"}},
	{names: []string{"syslog"}, unlessCaps: []string{"CAP_SYSLOG"}},
	{names: []string{"vhangup"}, unlessCaps: []string{"CAP_SYS_TTY_CONFIG"}},
}

// namespaceCloneFlags are the clone flags that make new namespaces. A clone
// with any of them is refused without CAP_SYS_ADMIN; an unprivileged user
// namespace is the usual first step of a kernel exploit.
var namespaceCloneFlags = []uint64{
	unix.CLONE_NEWNS, unix.CLONE_NEWCGROUP, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC,
	unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET, unix.CLONE_NEWTIME,
}

// defaultSeccompProfile builds the RuntimeDefault profile for a container
// holding caps.
func defaultSeccompProfile(caps capSet) *specs.LinuxSeccomp {
	profile := &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: seccompArchitectures(runtime.GOARCH),
	}
	for _, d := range seccompDenials {
		if holdsAny(caps, d.unlessCaps) {
			continue
		}
		errno := d.errno
		if errno == 0 {
			errno = uint(unix.EPERM)
		}
		profile.Syscalls = append(profile.Syscalls, specs.LinuxSyscall{
			Names: d.names, Action: specs.ActErrno, ErrnoRet: &errno,
		})
	}
	if !caps.has(capabilityNumbers["CAP_SYS_ADMIN"]) {
		profile.Syscalls = append(profile.Syscalls, cloneNamespaceDenials()...)
	}
	return profile
}

// cloneNamespaceDenials gives one rule per flag: the arguments of one rule
// are ANDed, separate rules are ORed.
func cloneNamespaceDenials() []specs.LinuxSyscall {
	rules := make([]specs.LinuxSyscall, 0, len(namespaceCloneFlags))
	for _, flag := range namespaceCloneFlags {
		errno := uint(unix.EPERM)
		rules = append(rules, specs.LinuxSyscall{
			Names:    []string{"clone"},
			Action:   specs.ActErrno,
			ErrnoRet: &errno,
			// MASKED_EQ: (flags & Value) == ValueTwo. The flags are the first
			// argument on x86 and arm.
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: flag, ValueTwo: flag, Op: specs.OpMaskedEqual}},
		})
	}
	return rules
}

func holdsAny(caps capSet, names []string) bool {
	for _, n := range names {
		if caps.has(capabilityNumbers[n]) {
			return true
		}
	}
	return false
}

// seccompArchitectures lists the native architecture and the compat ones its
// kernel can run, so that a 32-bit binary meets the same rules.
func seccompArchitectures(goarch string) []specs.Arch {
	switch goarch {
	case "amd64":
		return []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}
	case "arm64":
		return []specs.Arch{specs.ArchAARCH64, specs.ArchARM}
	case "386":
		return []specs.Arch{specs.ArchX86}
	case "arm":
		return []specs.Arch{specs.ArchARM}
	case "ppc64le":
		return []specs.Arch{specs.ArchPPC64LE}
	case "s390x":
		return []specs.Arch{specs.ArchS390X, specs.ArchS390}
	case "riscv64":
		return []specs.Arch{specs.ArchRISCV64}
	default:
		return nil // the runtime's native architecture only
	}
}

// seccompFor chooses the container's filter. Privileged containers get none.
func seccompFor(sec Security, caps capSet) (*specs.LinuxSeccomp, error) {
	if sec.Privileged {
		return nil, nil
	}
	switch sec.Seccomp.Type {
	case ProfileUnconfined:
		return nil, nil
	case ProfileRuntimeDefault:
		return defaultSeccompProfile(caps), nil
	case ProfileLocalhost:
		return loadSeccompProfile(sec.Seccomp.LocalhostPath, caps)
	default:
		return nil, fmt.Errorf("%w: unknown seccomp profile type %d", ErrInvalid, sec.Seccomp.Type)
	}
}
