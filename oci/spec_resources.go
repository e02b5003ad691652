package oci

import (
	"fmt"
	"path"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// defaultNofile is the RLIMIT_NOFILE containers get, as under Docker and
// containerd's usual unit files, lowered to the daemon's own hard limit.
const defaultNofile = 1048576

// systemdScopePrefix names the scopes of the systemd cgroup driver:
// slice:minicri:ID becomes minicri-ID.scope.
const systemdScopePrefix = "minicri"

// resourcesFor maps Resources onto the spec's cgroup limits. Only what is set
// is written, so that the runtime leaves the rest at the kernel's defaults.
func resourcesFor(r *Resources, h hostFacts) (*specs.LinuxResources, error) {
	out := &specs.LinuxResources{}
	if r == nil {
		return out, nil
	}
	if len(r.Unified) > 0 && !h.cgroup2 {
		return nil, fmt.Errorf("%w: unified cgroup resources need a cgroup v2 host; this host uses cgroup v1", ErrInvalid)
	}
	out.CPU = cpuResources(r)
	out.Memory = memoryResources(r, h)
	if r.PidsLimit > 0 {
		limit := r.PidsLimit
		out.Pids = &specs.LinuxPids{Limit: &limit}
	}
	for _, hp := range r.HugepageLimits {
		if !h.hugetlb {
			break // see MissingControllers
		}
		out.HugepageLimits = append(out.HugepageLimits, specs.LinuxHugepageLimit{Pagesize: hp.PageSize, Limit: hp.Limit})
	}
	if len(r.Unified) > 0 {
		out.Unified = make(map[string]string, len(r.Unified))
		for k, v := range r.Unified {
			out.Unified[k] = v
		}
	}
	return out, nil
}

func cpuResources(r *Resources) *specs.LinuxCPU {
	cpu := &specs.LinuxCPU{Cpus: r.CpusetCpus, Mems: r.CpusetMems}
	if r.CPUShares > 0 {
		shares := uint64(r.CPUShares)
		cpu.Shares = &shares
	}
	if r.CPUQuota != 0 {
		quota := r.CPUQuota
		cpu.Quota = &quota
	}
	if r.CPUPeriod > 0 {
		period := uint64(r.CPUPeriod)
		cpu.Period = &period
	}
	if *cpu == (specs.LinuxCPU{}) {
		return nil
	}
	return cpu
}

// MissingControllers names the cgroup controllers whose limits r sets but
// this host cannot apply: "hugetlb" where the controller is not mounted,
// "memory swap" where the memory cgroup does not account swap. GenerateSpec
// and LinuxResources leave those limits out instead of failing, as containerd
// does by default (tolerate_missing_hugetlb_controller): the kubelet sends a
// zero hugepage limit for every page size on every container, and a node
// without the controller cannot run a pod otherwise.
func MissingControllers(r *Resources) []string {
	return missingControllers(r, currentHost())
}

func missingControllers(r *Resources, h hostFacts) []string {
	if r == nil {
		return nil
	}
	var out []string
	if len(r.HugepageLimits) > 0 && !h.hugetlb {
		out = append(out, "hugetlb")
	}
	if r.MemorySwapLimitBytes > 0 && r.MemoryLimitBytes > 0 && !h.swapAccounting {
		out = append(out, "memory swap")
	}
	return out
}

// memoryResources sets the limit and, when swap is accounted and no swap limit
// is given, memory+swap equal to the limit: a container must not dodge its
// limit by swapping (containerd does the same).
func memoryResources(r *Resources, h hostFacts) *specs.LinuxMemory {
	if r.MemoryLimitBytes <= 0 {
		return nil
	}
	limit := r.MemoryLimitBytes
	mem := &specs.LinuxMemory{Limit: &limit}
	switch {
	case r.MemorySwapLimitBytes > 0 && h.swapAccounting:
		swap := r.MemorySwapLimitBytes
		mem.Swap = &swap
	case h.swapAccounting:
		swap := limit
		mem.Swap = &swap
	}
	return mem
}

// oomScoreAdj clamps the wanted value into [daemon's own, 1000]. The runtime
// writes it as the container's init, which inherits the daemon's privileges:
// without CAP_SYS_RESOURCE (as here) the kernel refuses a value below the
// writer's own and runc fails the whole create. A Guaranteed pod's -997 thus
// becomes the daemon's value; a daemon meant to protect such pods must itself
// run with a low oom_score_adj.
func oomScoreAdj(want int64, h hostFacts) int {
	v := max(want, int64(h.oomScoreAdj))
	return int(min(v, 1000))
}

// defaultRlimits raises RLIMIT_NOFILE for the container as far as the daemon's
// own hard limit allows: raising a hard limit needs CAP_SYS_RESOURCE, so asking
// for more makes runc fail with "operation not permitted".
func defaultRlimits(h hostFacts) []specs.POSIXRlimit {
	n := min(uint64(defaultNofile), h.nofileHard)
	return []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: n, Soft: n}}
}

// CgroupsPath names a container's cgroup for the given driver: cgroupfs uses
// PARENT/ID under the cgroup root; systemd uses slice:minicri:ID, with the pod's
// slice as parent (system.slice when none; SystemdSlice takes the kubelet's
// slice path).
func CgroupsPath(parent, id string, driver CgroupDriver) (string, error) {
	switch driver {
	case "", CgroupfsDriver:
		if strings.HasSuffix(parent, ".slice") {
			return "", fmt.Errorf("%w: cgroup parent %q is a systemd slice but the cgroup driver is cgroupfs", ErrInvalid, parent)
		}
		return path.Join("/", parent, id), nil
	case SystemdDriver:
		if parent == "" {
			parent = "system.slice"
		}
		slice, err := SystemdSlice(parent)
		if err != nil {
			return "", err
		}
		return slice + ":" + systemdScopePrefix + ":" + id, nil
	default:
		return "", fmt.Errorf("%w: unknown cgroup driver %q", ErrInvalid, driver)
	}
}

// LinuxResources maps Resources onto the runtime-spec limits that
// `runc update` applies to a running container, with the same host bounds
// as GenerateSpec.
func LinuxResources(r *Resources) (*specs.LinuxResources, error) {
	return resourcesFor(r, currentHost())
}
