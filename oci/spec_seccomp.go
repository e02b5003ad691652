package oci

import (
	"fmt"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The RuntimeDefault profile is Docker's and containerd's default
// (github.com/moby/profiles/seccomp): an allow list, whose default action
// answers EPERM. A syscall a future kernel adds stays refused until the
// profile lists it, and arguments are checked where they matter (the socket
// families, personality, the namespace flags of clone).
//
// The profile carries conditional rules that the library resolves for this
// container: a capability the container holds allows the syscalls of its
// legitimate use (CAP_SYS_ADMIN: mount, unshare, setns …; CAP_SYS_NICE: the
// NUMA calls; CAP_SYS_PTRACE: ptrace …), and the architecture and kernel of
// this host pick the architecture-specific rules and the compat architectures
// (x86 and x32 on amd64) that must meet the same rules.
//
// runc ignores a name its libseccomp does not know (a syscall newer than
// libseccomp 2.5.4 on Debian 12), so the profile's newest entries cost
// nothing on older hosts.

// defaultSeccompProfile builds the RuntimeDefault profile for a container
// holding caps.
func defaultSeccompProfile(caps capSet) (*specs.LinuxSeccomp, error) {
	// The library reads the container's capabilities from the spec's
	// bounding set, the set that bounds what the process can ever hold.
	s := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: caps.names()}}}
	p, err := seccomp.GetDefaultProfile(s)
	if err != nil {
		return nil, fmt.Errorf("default seccomp profile: %w", err)
	}
	return p, nil
}

// seccompFor chooses the container's filter. Privileged containers get none.
func seccompFor(sec Security, caps capSet) (*specs.LinuxSeccomp, error) {
	if sec.Privileged {
		return nil, nil
	}
	switch sec.Seccomp.Type {
	case ProfileUnset, ProfileUnconfined:
		return nil, nil
	case ProfileRuntimeDefault:
		return defaultSeccompProfile(caps)
	case ProfileLocalhost:
		return loadSeccompProfile(sec.Seccomp.LocalhostPath, caps)
	default:
		return nil, fmt.Errorf("%w: unknown seccomp profile type %d", ErrInvalid, sec.Seccomp.Type)
	}
}
