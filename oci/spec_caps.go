package oci

import (
	"fmt"
	"strings"
)

// capabilityNames are the kernel's capabilities, indexed by number.
var capabilityNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER",
	"CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP",
	"CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST",
	"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
	"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD",
	"CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP",
	"CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

var capabilityNumbers = func() map[string]int {
	m := make(map[string]int, len(capabilityNames))
	for i, n := range capabilityNames {
		m[n] = i
	}
	return m
}()

// DefaultCapabilities is the set containerd and cri-o give a container.
var DefaultCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// capSet is a set of capabilities as a bit mask, as the kernel keeps them.
type capSet uint64

func (s capSet) has(n int) bool { return s&(1<<n) != 0 }

// names lists the set in capability-number order.
func (s capSet) names() []string {
	out := []string{}
	for n, name := range capabilityNames {
		if s.has(n) {
			out = append(out, name)
		}
	}
	return out
}

// capSetOf returns the set of known names; names must be normalized.
func capSetOf(names []string) capSet {
	var s capSet
	for _, n := range names {
		s |= 1 << capabilityNumbers[n]
	}
	return s
}

// normalizeCapability accepts "net_admin", "NET_ADMIN", "cap_net_admin" and
// returns "CAP_NET_ADMIN"; an unknown name is an ErrInvalid error naming it.
func normalizeCapability(name string) (string, error) {
	n := strings.ToUpper(strings.TrimSpace(name))
	if !strings.HasPrefix(n, "CAP_") {
		n = "CAP_" + n
	}
	if _, ok := capabilityNumbers[n]; !ok {
		return "", fmt.Errorf("%w: unknown capability %q", ErrInvalid, name)
	}
	return n, nil
}

func isAllCapabilities(name string) bool {
	n := strings.ToUpper(strings.TrimSpace(name))
	return n == "ALL" || n == "CAP_ALL"
}

// capabilities computes the container's capability set the way containerd
// does: start from the default set (or, privileged, everything); "ALL" in add
// or drop applies first, so that add ALL + drop X is everything but X and
// drop ALL + add X is only X; then single adds, then single drops.
//
// "Everything" is the daemon's own bounding set: the runtime cannot grant a
// capability the daemon lacks (here, CAP_SYS_RESOURCE), and asking for one by
// name is an error rather than a runc failure at start.
func capabilities(sec Security, h hostFacts) (capSet, error) {
	available := h.availableCaps()
	if sec.Privileged {
		return available, nil
	}
	add, addAll, err := parseCapabilityList(sec.AddCapabilities)
	if err != nil {
		return 0, err
	}
	drop, dropAll, err := parseCapabilityList(sec.DropCapabilities)
	if err != nil {
		return 0, err
	}
	set := capSetOf(DefaultCapabilities) & available
	if addAll {
		set = available
	}
	if dropAll {
		set = 0
	}
	if missing := add &^ available; missing != 0 {
		return 0, fmt.Errorf("%w: capabilities %v are not available to the runtime on this host", ErrInvalid, missing.names())
	}
	return (set | add) &^ drop, nil
}

// parseCapabilityList normalizes names into a set and reports whether "ALL"
// was among them.
func parseCapabilityList(names []string) (set capSet, all bool, err error) {
	for _, name := range names {
		if isAllCapabilities(name) {
			all = true
			continue
		}
		n, err := normalizeCapability(name)
		if err != nil {
			return 0, false, err
		}
		set |= 1 << capabilityNumbers[n]
	}
	return set, all, nil
}

// availableCaps is the daemon's bounding set, limited to what the kernel and
// this table know.
func (h hostFacts) availableCaps() capSet {
	last := min(h.lastCap, len(capabilityNames)-1)
	known := capSet(1)<<(last+1) - 1
	return h.boundingCaps & known
}
