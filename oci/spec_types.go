package oci

import specs "github.com/opencontainers/runtime-spec/specs-go"

// ContainerSpec is everything GenerateSpec needs to write a container's
// config.json. The server fills it from the CRI ContainerConfig, the sandbox and
// the image config; the zero value of each field is the safe default.
type ContainerSpec struct {
	// ID names the container; it is the last element of the cgroup path.
	ID string
	// Rootfs is the host path of the prepared root filesystem.
	Rootfs string

	// Args is the resolved command line (see ResolveArgs).
	Args []string
	// Env is the merged environment (see MergeEnv). GenerateSpec adds HOSTNAME
	// and HOME when Env does not set them.
	Env []string
	// Cwd is the working directory; "" means "/".
	Cwd string
	// User is the resolved user (see ResolveUser).
	User User
	// Terminal asks for a pty as the process's stdio.
	Terminal bool
	// Stdin records CRI's stdin flag. It does not change the spec: keeping stdin
	// open is the monitor's job.
	Stdin bool
	// Hostname is set in the UTS namespace (unless the host's is shared) and as
	// HOSTNAME in the environment.
	Hostname string

	// Mounts are the CRI mounts, applied over the standard ones; a mount on the
	// same container path replaces the standard mount.
	Mounts []Mount
	// Devices are the host devices to create in the container.
	Devices []Device
	// Resources are the cgroup limits; nil leaves all unlimited and the
	// oom_score_adj inherited.
	Resources *Resources
	// Security is the Linux security context.
	Security Security
	// Namespaces says which namespaces are new, joined or the host's.
	Namespaces Namespaces
	// Sysctls are namespaced kernel parameters set in the container.
	Sysctls map[string]string
	// Annotations are copied into the spec.
	Annotations map[string]string
	// Rlimits replaces the default RLIMIT_NOFILE when not nil.
	Rlimits []specs.POSIXRlimit

	// CgroupParent is the pod's cgroup: a path (cgroupfs) or a slice (systemd).
	CgroupParent string
	// CgroupDriver selects the cgroup path format; "" means cgroupfs.
	CgroupDriver CgroupDriver

	// ShmPath is the pod's /dev/shm to bind; "" gives the container a private tmpfs.
	ShmPath string
	// HostsPath, ResolvConfPath and HostnamePath are files the server prepared
	// for the pod, bound over /etc/hosts, /etc/resolv.conf and /etc/hostname;
	// "" skips the mount.
	HostsPath      string
	ResolvConfPath string
	HostnamePath   string
}

// KeyValue is one environment variable of the container config.
type KeyValue struct {
	Key   string
	Value string
}

// User is the identity the container's process runs as.
type User struct {
	UID uint32
	GID uint32
	// AdditionalGids holds the primary gid, the image's /etc/group memberships
	// and the supplemental groups, without duplicates.
	AdditionalGids []uint32
	// Username is the passwd name of UID in the image, "" when it has none.
	Username string
	// Home is the passwd home directory of UID, "" when unknown.
	Home string
}

// Propagation is a bind mount's propagation mode.
type Propagation int

const (
	// PropagationPrivate: no mount events cross between host and container.
	PropagationPrivate Propagation = iota
	// PropagationHostToContainer: host mounts appear in the container (rslave).
	PropagationHostToContainer
	// PropagationBidirectional: mounts cross both ways (rshared).
	PropagationBidirectional
)

// Mount is one CRI mount: a host path bound into the container.
type Mount struct {
	ContainerPath string
	HostPath      string
	Readonly      bool
	// RecursiveReadOnly makes the mounts below HostPath read-only too
	// (the runtime's "rro" option); it needs Readonly and private
	// propagation, and a runtime whose features list "rro".
	RecursiveReadOnly bool
	// Inert mounts it nosuid and nodev (an image volume): its binaries
	// run, but a setuid one raises no privileges, and its device nodes
	// open nothing. Not noexec: KEP-4639 lets a pod run what an image
	// volume ships.
	Inert       bool
	Propagation Propagation
	// SelinuxRelabel is accepted and ignored: minicri does not run with SELinux.
	SelinuxRelabel bool
}

// Device is one host device node made available in the container.
type Device struct {
	HostPath      string
	ContainerPath string
	// Permissions is a subset of "rwm"; "" means "rwm".
	Permissions string
}

// HugepageLimit limits one hugepage size, e.g. PageSize "2MB".
type HugepageLimit struct {
	PageSize string
	Limit    uint64
}

// Resources are a container's cgroup limits. Zero means "not set".
type Resources struct {
	CPUShares            int64
	CPUQuota             int64
	CPUPeriod            int64
	CpusetCpus           string
	CpusetMems           string
	MemoryLimitBytes     int64
	MemorySwapLimitBytes int64
	// OomScoreAdj is raised to the daemon's own when lower (see GenerateSpec).
	OomScoreAdj    int64
	PidsLimit      int64
	HugepageLimits []HugepageLimit
	// Unified holds cgroup v2 files and values; it needs a cgroup v2 host.
	Unified map[string]string
}

// Security is the Linux security context of a container.
type Security struct {
	Privileged       bool
	AddCapabilities  []string
	DropCapabilities []string
	NoNewPrivs       bool
	ReadonlyRootfs   bool
	// MaskedPaths and ReadonlyPaths replace the defaults when not nil (an empty,
	// non-nil slice means none). Privileged containers get none.
	MaskedPaths   []string
	ReadonlyPaths []string
	Seccomp       SeccompProfile
	AppArmor      AppArmorProfile
}

// ProfileType says which seccomp or AppArmor profile applies.
type ProfileType int

const (
	// ProfileUnset is a request that names no profile, the zero value. Seccomp
	// then applies none (the kubelet asks for RuntimeDefault when it wants
	// it); AppArmor applies the runtime's default, as containerd and cri-o do.
	ProfileUnset ProfileType = iota
	// ProfileUnconfined applies no profile.
	ProfileUnconfined
	// ProfileRuntimeDefault applies the runtime's default profile.
	ProfileRuntimeDefault
	// ProfileLocalhost applies a profile from the node: a JSON file for
	// seccomp, a loaded profile name for AppArmor.
	ProfileLocalhost
)

// SeccompProfile selects the container's seccomp filter.
type SeccompProfile struct {
	Type ProfileType
	// LocalhostPath is the profile file for ProfileLocalhost.
	LocalhostPath string
}

// AppArmorProfile selects the container's AppArmor profile. It is ignored when
// the host does not have AppArmor enabled; there, an unprivileged container
// that names none gets DefaultAppArmorProfile.
type AppArmorProfile struct {
	Type ProfileType
	// LocalhostName is the loaded profile's name for ProfileLocalhost.
	LocalhostName string
}

// NamespaceMode says where a container's namespace comes from.
type NamespaceMode int

const (
	// NamespaceNew gives the container a namespace of its own.
	NamespaceNew NamespaceMode = iota
	// NamespaceJoin joins the namespace at Path: the pod's pinned namespace,
	// or /proc/PID/ns/pid of the pod's infra process.
	NamespaceJoin
	// NamespaceHost shares the host's namespace.
	NamespaceHost
)

// Namespace is one namespace choice.
type Namespace struct {
	Mode NamespaceMode
	Path string
}

// Namespaces are the container's namespace choices. The mount namespace is
// always new. The cgroup namespace is new on a cgroup v2 host and the host's on
// cgroup v1, as containerd does: v1 tools inside containers expect host paths.
type Namespaces struct {
	Network Namespace
	IPC     Namespace
	UTS     Namespace
	PID     Namespace
	// User is NamespaceJoin for a pod with a user namespace of its own
	// (spec_userns.go); any other mode means the host's.
	User Namespace
}

// CgroupDriver is how cgroups are named and managed.
type CgroupDriver string

const (
	// CgroupfsDriver writes cgroup directories directly: PARENT/ID.
	CgroupfsDriver CgroupDriver = "cgroupfs"
	// SystemdDriver asks systemd for a scope: slice:minicri:ID.
	SystemdDriver CgroupDriver = "systemd"
)
