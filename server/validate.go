package server

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unicode"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/store"
)

// Limits on what a request may carry. They are generous for any real pod and
// stop a caller from making the daemon write huge records or paths.
const (
	maxNameLen     = 253 // a Kubernetes DNS subdomain
	maxHostnameLen = 64  // the kernel's limit
	maxValueLen    = 4096
	maxListLen     = 1024
	// maxArgLen is the kernel's MAX_ARG_STRLEN: execve refuses a longer
	// argument or environment string.
	maxArgLen = 128 << 10
	// maxAnnotationsSize is the API server's limit on all of an object's
	// annotations together; the kubelet passes a pod's on unchanged.
	maxAnnotationsSize = 256 << 10
)

// validateName checks a metadata name, namespace or UID: the parts of the
// reserved name and of the kubelet's log directory.
func validateName(field, v string) error {
	if v == "" {
		return invalidf(field, "must not be empty")
	}
	if len(v) > maxNameLen {
		return invalidf(field, "is %d bytes, longer than %d", len(v), maxNameLen)
	}
	if strings.ContainsAny(v, "/\\") || v == "." || v == ".." {
		return invalidf(field, "%q must not contain a path separator or be a dot name", v)
	}
	if err := validatePrintable(field, v); err != nil {
		return err
	}
	return nil
}

// validatePrintable refuses control characters, which would break log lines,
// generated files (/etc/hosts) and record names.
func validatePrintable(field, v string) error {
	if len(v) > maxValueLen {
		return invalidf(field, "is %d bytes, longer than %d", len(v), maxValueLen)
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return invalidf(field, "must not contain control characters (found %q)", r)
		}
	}
	return nil
}

// validateHostPath checks an absolute path on the node named by a request.
func validateHostPath(field, p string) error {
	if !filepath.IsAbs(p) {
		return invalidf(field, "%q must be an absolute path", p)
	}
	return validateCleanPath(field, p)
}

// validateCleanPath refuses ".." components: no request may reach outside
// the directory it names by walking up.
func validateCleanPath(field, p string) error {
	if err := validatePrintable(field, p); err != nil {
		return err
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return invalidf(field, "%q must not contain \"..\"", p)
		}
	}
	return nil
}

func validateStrings(field string, values []string) error {
	return validateList(field, values, validatePrintable)
}

// validateList checks a list's length, then each entry with check.
func validateList(field string, values []string, check func(field, v string) error) error {
	if len(values) > maxListLen {
		return invalidf(field, "has %d entries, more than %d", len(values), maxListLen)
	}
	for _, v := range values {
		if err := check(field, v); err != nil {
			return err
		}
	}
	return nil
}

// named is a request field's name and value, for the checks that run over
// several alike fields.
type named[T any] struct {
	name string
	v    T
}

// validateEach runs check on each field in turn and answers the first error.
func validateEach[T any](check func(field string, v T) error, fields []named[T]) error {
	for _, f := range fields {
		if err := check(f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

// namespaceModes names a pod's namespace modes as their CRI fields are named.
func namespaceModes(o *runtime.NamespaceOption) []named[runtime.NamespaceMode] {
	return []named[runtime.NamespaceMode]{{"network", o.GetNetwork()}, {"pid", o.GetPid()}, {"ipc", o.GetIpc()}}
}

func validateMap(field string, m map[string]string) error {
	if len(m) > maxListLen {
		return invalidf(field, "has %d entries, more than %d", len(m), maxListLen)
	}
	for k, v := range m {
		if k == "" {
			return invalidf(field, "has an empty key")
		}
		if err := validatePrintable(field+"["+k+"]", k+v); err != nil {
			return err
		}
	}
	return nil
}

// validateAnnotations checks annotation keys like labels, but lets values be
// what the API server lets them be: any text up to 256 KiB in all, newlines
// included (kubectl's last-applied-configuration ends with one).
func validateAnnotations(field string, m map[string]string) error {
	size := 0
	for k, v := range m {
		if k == "" {
			return invalidf(field, "has an empty key")
		}
		if err := validatePrintable(field, k); err != nil {
			return err
		}
		if strings.IndexByte(v, 0) >= 0 {
			return invalidf(field+"["+k+"]", "must not contain NUL")
		}
		size += len(k) + len(v)
	}
	if size > maxAnnotationsSize {
		return invalidf(field, "are %d bytes in all, more than %d", size, maxAnnotationsSize)
	}
	return nil
}

// validateArgs checks a command line: each string goes to execve, which
// takes any bytes but NUL (a multi-line "sh -c" script is common) and none
// longer than maxArgLen.
func validateArgs(field string, args []string) error {
	return validateList(field, args, func(field, a string) error {
		if len(a) > maxArgLen {
			return invalidf(field, "has an entry of %d bytes, longer than %d", len(a), maxArgLen)
		}
		if strings.IndexByte(a, 0) >= 0 {
			return invalidf(field, "must not contain NUL")
		}
		return nil
	})
}

// validateContainerPaths checks paths inside the container: absolute, no "..".
func validateContainerPaths(field string, paths []string) error {
	return validateList(field, paths, validateHostPath)
}

func validateNamespaceMode(field string, m runtime.NamespaceMode) error {
	if _, ok := runtime.NamespaceMode_name[int32(m)]; !ok {
		return invalidf(field, "unknown namespace mode %d", m)
	}
	return nil
}

func validateNamespaceOptions(field string, o *runtime.NamespaceOption) error {
	if o == nil {
		return nil
	}
	for _, c := range namespaceModes(o) {
		if err := validateNamespaceMode(field+"."+c.name, c.v); err != nil {
			return err
		}
		if c.v == runtime.NamespaceMode_TARGET && c.name != "pid" {
			return invalidf(field+"."+c.name, "TARGET is a PID namespace mode only")
		}
	}
	if o.GetPid() == runtime.NamespaceMode_TARGET && o.GetTargetId() == "" {
		return invalidf(field+".target_id", "must name the target container of PID mode TARGET")
	}
	return validateUserNamespace(field+".userns_options", o.GetUsernsOptions())
}

// selinuxEnabled reports whether the host runs SELinux. minicri does not
// label containers: SELinux options are refused on such a host, where a
// container would run with the wrong label, and ignored on any other, as
// containerd ignores them when SELinux is off.
var selinuxEnabled = sync.OnceValue(func() bool {
	_, err := os.Stat("/sys/fs/selinux/enforce")
	return err == nil
})

// validateUnsupportedSecurity refuses the security context fields that
// minicri cannot honour, when they ask for something other than the
// default the kubelet sends.
func validateUnsupportedSecurity(field string, p runtime.SupplementalGroupsPolicy, selinux *runtime.SELinuxOption) error {
	switch p {
	case runtime.SupplementalGroupsPolicy_Merge:
		// The CRI's default, and containerd's behaviour when unset: the
		// image's /etc/group memberships are merged in (oci.ResolveUser).
	case runtime.SupplementalGroupsPolicy_Strict:
		// Only the pod's groups: the image's /etc/group is left out
		// (oci.ResolveUserStrict).
	default:
		return invalidf(field+".supplemental_groups_policy", "unknown policy %d", p)
	}
	if selinux != nil && selinuxEnabled() {
		return invalidf(field+".selinux_options", "SELinux labels are not supported by minicri, and this host runs SELinux")
	}
	return nil
}

// validateMountSupported refuses the mount fields minicri cannot honour.
// The kubelet sets none of them for an ordinary volume: recursive_read_only
// only when the runtime reports the feature (whether the handler's runtime
// has it is checked at create, see checkHandlerMounts), ID mappings only
// with a user namespace, mount_options only when the runtime reports the
// feature.
func validateMountSupported(m *runtime.Mount) error {
	if len(m.GetUidMappings()) > 0 || len(m.GetGidMappings()) > 0 {
		if err := validateMountIDMappings(m); err != nil {
			return err
		}
	}
	switch {
	case m.GetRecursiveReadOnly() && !m.GetReadonly():
		return invalidf("config.mounts.recursive_read_only", "mount %s is recursively read-only but not read-only (readonly: false)", m.GetContainerPath())
	case m.GetRecursiveReadOnly() && m.GetPropagation() != runtime.MountPropagation_PROPAGATION_PRIVATE:
		// A slave or shared mount would receive writable mounts from the
		// host after it was made read-only.
		return invalidf("config.mounts.recursive_read_only", "mount %s is recursively read-only but its propagation is %v, not private", m.GetContainerPath(), m.GetPropagation())
	case len(m.GetMountOptions()) > 0:
		return invalidf("config.mounts.mount_options", "extra mount options %q are not supported by minicri", m.GetMountOptions())
	case m.GetSelinuxRelabel() && selinuxEnabled():
		return invalidf("config.mounts.selinux_relabel", "SELinux relabeling is not supported by minicri, and this host runs SELinux")
	}
	return nil
}

// validateContainerInPod refuses a container that asks for the host's
// network or IPC namespace in a pod that has its own: a container shares
// its pod's, and handing it the pod's instead would drop what it asked for.
// The kubelet always sends the pod's modes.
func validateContainerInPod(sbCfg *runtime.PodSandboxConfig, c *runtime.ContainerConfig) error {
	pod := sbCfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	ctr := c.GetLinux().GetSecurityContext().GetNamespaceOptions()
	const field = "config.linux.security_context.namespace_options"
	if ctr.GetNetwork() == runtime.NamespaceMode_NODE && pod.GetNetwork() != runtime.NamespaceMode_NODE {
		return invalidf(field+".network", "NODE in a pod with a network of its own: a container shares its pod's network")
	}
	if ctr.GetIpc() == runtime.NamespaceMode_NODE && pod.GetIpc() != runtime.NamespaceMode_NODE {
		return invalidf(field+".ipc", "NODE in a pod with an IPC namespace of its own: a container shares its pod's")
	}
	return validateContainerUserNamespace(sbCfg, c)
}

func validateSecurityProfile(field string, p *runtime.SecurityProfile) error {
	if p == nil {
		return nil
	}
	switch p.GetProfileType() {
	case runtime.SecurityProfile_RuntimeDefault, runtime.SecurityProfile_Unconfined:
		return nil
	case runtime.SecurityProfile_Localhost:
		if p.GetLocalhostRef() == "" {
			return invalidf(field+".localhost_ref", "must name a profile for a Localhost profile")
		}
		return validatePrintable(field+".localhost_ref", p.GetLocalhostRef())
	default:
		return invalidf(field+".profile_type", "unknown profile type %d", p.GetProfileType())
	}
}

// validateSandboxConfig checks every field of a RunPodSandbox config that
// minicri reads, naming the first bad one.
func validateSandboxConfig(c *runtime.PodSandboxConfig) error {
	if c == nil {
		return invalidf("config", "is required")
	}
	m := c.GetMetadata()
	if m == nil {
		return invalidf("config.metadata", "is required")
	}
	if err := validateEach(validateName, []named[string]{
		{"config.metadata.name", m.GetName()},
		{"config.metadata.namespace", m.GetNamespace()},
		{"config.metadata.uid", m.GetUid()},
	}); err != nil {
		return err
	}
	if h := c.GetHostname(); len(h) > maxHostnameLen {
		return invalidf("config.hostname", "is %d bytes, longer than %d", len(h), maxHostnameLen)
	} else if strings.ContainsAny(h, " /\t\n\x00") || validatePrintable("config.hostname", h) != nil {
		return invalidf("config.hostname", "%q is not a host name", h)
	}
	if d := c.GetLogDirectory(); d != "" {
		if err := validateHostPath("config.log_directory", d); err != nil {
			return err
		}
	}
	if dns := c.GetDnsConfig(); dns != nil {
		for _, l := range []named[[]string]{{"config.dns_config.servers", dns.GetServers()}, {"config.dns_config.searches", dns.GetSearches()}, {"config.dns_config.options", dns.GetOptions()}} {
			if err := validateStrings(l.name, l.v); err != nil {
				return err
			}
			for _, v := range l.v {
				if strings.ContainsAny(v, " \t") && l.name != "config.dns_config.options" {
					return invalidf(l.name, "%q must not contain spaces", v)
				}
			}
		}
		for _, server := range dns.GetServers() {
			if net.ParseIP(server) == nil {
				return invalidf("config.dns_config.servers", "%q is not an IP address", server)
			}
		}
	}
	for _, p := range c.GetPortMappings() {
		if err := validatePortMapping(p); err != nil {
			return err
		}
	}
	if err := validateLabelsAndAnnotations(c.GetLabels(), c.GetAnnotations()); err != nil {
		return err
	}
	return validateLinuxSandboxConfig(c.GetLinux())
}

func validatePortMapping(p *runtime.PortMapping) error {
	if p == nil {
		return invalidf("config.port_mappings", "has a null entry")
	}
	if _, ok := runtime.Protocol_name[int32(p.GetProtocol())]; !ok {
		return invalidf("config.port_mappings.protocol", "unknown protocol %d", p.GetProtocol())
	}
	if p.GetContainerPort() <= 0 || p.GetContainerPort() > 65535 {
		return invalidf("config.port_mappings.container_port", "%d is not a port", p.GetContainerPort())
	}
	if p.GetHostPort() < 0 || p.GetHostPort() > 65535 {
		return invalidf("config.port_mappings.host_port", "%d is not a port", p.GetHostPort())
	}
	if ip := p.GetHostIp(); ip != "" && net.ParseIP(ip) == nil {
		return invalidf("config.port_mappings.host_ip", "%q is not an IP address", ip)
	}
	return nil
}

func validateLinuxSandboxConfig(l *runtime.LinuxPodSandboxConfig) error {
	if l == nil {
		return nil
	}
	if p := l.GetCgroupParent(); p != "" {
		if err := validateCleanPath("config.linux.cgroup_parent", p); err != nil {
			return err
		}
	}
	for k, v := range l.GetSysctls() {
		// A sysctl becomes a path under /proc/sys: no separators of its
		// own, no empty (or dot) components.
		if k == "" || strings.ContainsAny(k, " /\x00\n=") || strings.Contains(k, "..") || strings.HasPrefix(k, ".") || strings.HasSuffix(k, ".") {
			return invalidf("config.linux.sysctls", "%q is not a sysctl name", k)
		}
		if err := validatePrintable("config.linux.sysctls["+k+"]", v); err != nil {
			return err
		}
	}
	sc := l.GetSecurityContext()
	if err := validateNamespaceOptions("config.linux.security_context.namespace_options", sc.GetNamespaceOptions()); err != nil {
		return err
	}
	if sc.GetNamespaceOptions().GetPid() == runtime.NamespaceMode_TARGET {
		return invalidf("config.linux.security_context.namespace_options.pid", "TARGET is for a container, not a pod")
	}
	if err := validateUnsupportedSecurity("config.linux.security_context", sc.GetSupplementalGroupsPolicy(), sc.GetSelinuxOptions()); err != nil {
		return err
	}
	if err := validateSecurityProfile("config.linux.security_context.seccomp", sc.GetSeccomp()); err != nil {
		return err
	}
	if err := validateSandboxUser(sc); err != nil {
		return err
	}
	if err := validateResources("config.linux.resources", l.GetResources()); err != nil {
		return err
	}
	return validateResources("config.linux.overhead", l.GetOverhead())
}

// validateSandboxUser checks the pod-level user, which has no user name:
// containerd builds the sandbox's user with the same rule as a container's,
// so a group without a user is refused there too.
func validateSandboxUser(sc *runtime.LinuxSandboxSecurityContext) error {
	return validateRunAs(sc.GetRunAsUser(), sc.GetRunAsGroup(), sc.GetSupplementalGroups(), sc.GetRunAsUser() != nil, "run_as_user")
}

// validateRunAs checks the IDs a pod or a container runs as. A group needs
// a user, named by the fields userFields lists: as containerd
// (util.GenerateUserString: "user group is specified without user"), a
// group alone would run as the image's user with another group, which no
// pod spec can mean.
func validateRunAs(user, group *runtime.Int64Value, groups []int64, hasUser bool, userFields string) error {
	if user != nil {
		if err := validateLinuxID("config.linux.security_context.run_as_user", user.GetValue()); err != nil {
			return err
		}
	}
	if group != nil {
		if err := validateLinuxID("config.linux.security_context.run_as_group", group.GetValue()); err != nil {
			return err
		}
		if !hasUser {
			return invalidf("config.linux.security_context.run_as_group", "is set without %s", userFields)
		}
	}
	for _, g := range groups {
		if err := validateLinuxID("config.linux.security_context.supplemental_groups", g); err != nil {
			return err
		}
	}
	return nil
}

// validateResources refuses negative limits; zero means "not set" in the CRI.
func validateResources(field string, r *runtime.LinuxContainerResources) error {
	if r == nil {
		return nil
	}
	for _, v := range []named[int64]{
		{"cpu_period", r.GetCpuPeriod()}, {"cpu_shares", r.GetCpuShares()},
		{"memory_limit_in_bytes", r.GetMemoryLimitInBytes()},
	} {
		if v.v < 0 {
			return invalidf(field+"."+v.name, "must not be negative (%d)", v.v)
		}
	}
	if q := r.GetCpuQuota(); q < -1 {
		return invalidf(field+".cpu_quota", "must be -1 (unlimited) or more (%d)", q)
	} else if q > 0 && q < 1000 {
		return invalidf(field+".cpu_quota", "%d is below the kernel's minimum of 1000 microseconds", q)
	}
	// The kernel's bounds: 1 ms to 1 s. runc would fail with less to go on.
	if p := r.GetCpuPeriod(); p != 0 && (p < 1000 || p > 1000000) {
		return invalidf(field+".cpu_period", "%d is outside 1000..1000000 microseconds", p)
	}
	if s := r.GetMemorySwapLimitInBytes(); s < -1 {
		return invalidf(field+".memory_swap_limit_in_bytes", "must be -1 (unlimited) or more (%d)", s)
	}
	if a := r.GetOomScoreAdj(); a < -1000 || a > 1000 {
		return invalidf(field+".oom_score_adj", "%d is outside -1000..1000", a)
	}
	for _, s := range []named[string]{{"cpuset_cpus", r.GetCpusetCpus()}, {"cpuset_mems", r.GetCpusetMems()}} {
		if strings.Trim(s.v, "0123456789,-") != "" {
			return invalidf(field+"."+s.name, "%q is not a CPU or node list like 0-3,5", s.v)
		}
	}
	for _, h := range r.GetHugepageLimits() {
		if h.GetPageSize() == "" || strings.ContainsAny(h.GetPageSize(), "/.") {
			return invalidf(field+".hugepage_limits.page_size", "%q is not a page size like 2MB", h.GetPageSize())
		}
	}
	for k := range r.GetUnified() {
		// Each key is a file name in the container's cgroup directory.
		if strings.ContainsAny(k, "/\x00") || k == "." || k == ".." {
			return invalidf(field+".unified", "%q is not a cgroup file name", k)
		}
	}
	return validateMap(field+".unified", r.GetUnified())
}

// validateContainerConfig checks every field of a CreateContainer config that
// minicri reads.
func validateContainerConfig(c *runtime.ContainerConfig) error {
	if c == nil {
		return invalidf("config", "is required")
	}
	if c.GetMetadata() == nil {
		return invalidf("config.metadata", "is required")
	}
	if err := validateName("config.metadata.name", c.GetMetadata().GetName()); err != nil {
		return err
	}
	if c.GetImage().GetImage() == "" {
		return invalidf("config.image.image", "must name an image")
	}
	if err := validateImageRef("config.image.image", c.GetImage().GetImage()); err != nil {
		return err
	}
	if lp := c.GetLogPath(); lp != "" {
		if filepath.IsAbs(lp) {
			return invalidf("config.log_path", "%q must be relative to the sandbox's log_directory", lp)
		}
		if err := validateCleanPath("config.log_path", lp); err != nil {
			return err
		}
	}
	if err := validateEach(validateArgs, []named[[]string]{{"config.command", c.GetCommand()}, {"config.args", c.GetArgs()}}); err != nil {
		return err
	}
	if wd := c.GetWorkingDir(); wd != "" && !filepath.IsAbs(wd) {
		return invalidf("config.working_dir", "%q must be an absolute path", wd)
	} else if err := validatePrintable("config.working_dir", wd); err != nil {
		return err
	}
	for _, e := range c.GetEnvs() {
		if e.GetKey() == "" || strings.ContainsAny(e.GetKey(), "=\x00") {
			return invalidf("config.envs", "%q is not a variable name", e.GetKey())
		}
		if len(e.GetKey())+len(e.GetValue()) >= maxArgLen {
			return invalidf("config.envs["+e.GetKey()+"]", "is %d bytes, longer than %d", len(e.GetValue()), maxArgLen)
		}
		if bytes.IndexByte(e.GetValue(), 0) >= 0 {
			return invalidf("config.envs["+e.GetKey()+"]", "must not contain NUL")
		}
	}
	if len(c.GetMounts()) > maxListLen || len(c.GetDevices()) > maxListLen {
		return invalidf("config.mounts", "%d mounts and %d devices: more than %d", len(c.GetMounts()), len(c.GetDevices()), maxListLen)
	}
	for _, m := range c.GetMounts() {
		if err := validateMount(m); err != nil {
			return err
		}
	}
	for _, d := range c.GetDevices() {
		if err := validateHostPath("config.devices.host_path", d.GetHostPath()); err != nil {
			return err
		}
		if err := validateHostPath("config.devices.container_path", d.GetContainerPath()); err != nil {
			return err
		}
		if strings.Trim(d.GetPermissions(), "rwm") != "" {
			return invalidf("config.devices.permissions", "%q must be made of r, w and m", d.GetPermissions())
		}
	}
	for _, m := range c.GetMounts() {
		if err := validateMountSupported(m); err != nil {
			return err
		}
	}
	if len(c.GetCDIDevices()) > maxListLen {
		return invalidf("config.CDI_devices", "has %d entries, more than %d", len(c.GetCDIDevices()), maxListLen)
	}
	for _, r := range cdiRequests(c) {
		if !cdiparser.IsQualifiedName(r.device) {
			return invalidf(r.field, "%q is not a CDI device name (vendor.com/class=name)", r.device)
		}
	}
	if err := validateLabelsAndAnnotations(c.GetLabels(), c.GetAnnotations()); err != nil {
		return err
	}
	if _, ok := runtime.Signal_name[int32(c.GetStopSignal())]; !ok {
		return invalidf("config.stop_signal", "unknown signal %d", c.GetStopSignal())
	}
	return validateLinuxContainerConfig(c.GetLinux())
}

func validateMount(m *runtime.Mount) error {
	if m == nil {
		return invalidf("config.mounts", "has a null entry")
	}
	if err := validateHostPath("config.mounts.container_path", m.GetContainerPath()); err != nil {
		return err
	}
	if m.GetImage().GetImage() != "" {
		return validateImageMount(m)
	}
	if m.GetImageSubPath() != "" {
		return invalidf("config.mounts.image_sub_path", "%q needs an image volume (config.mounts.image)", m.GetImageSubPath())
	}
	if err := validateHostPath("config.mounts.host_path", m.GetHostPath()); err != nil {
		return err
	}
	return validatePropagation(m.GetPropagation())
}

// validatePropagation refuses a mount propagation the CRI does not define.
func validatePropagation(p runtime.MountPropagation) error {
	if _, ok := runtime.MountPropagation_name[int32(p)]; !ok {
		return invalidf("config.mounts.propagation", "unknown propagation %d", p)
	}
	return nil
}

// validateLabelsAndAnnotations checks the labels and annotations of a pod's
// or a container's config.
func validateLabelsAndAnnotations(labels, annotations map[string]string) error {
	if err := validateMap("config.labels", labels); err != nil {
		return err
	}
	return validateAnnotations("config.annotations", annotations)
}

// validateImageMount checks an image volume (KEP-4639): an image, mounted
// read-only, all of it or the directory image_sub_path names in it. It has
// no host path: the image is the source.
func validateImageMount(m *runtime.Mount) error {
	if err := validateImageRef("config.mounts.image.image", m.GetImage().GetImage()); err != nil {
		return err
	}
	if m.GetHostPath() != "" {
		return invalidf("config.mounts.host_path", "%q: an image volume has no host path", m.GetHostPath())
	}
	if !m.GetReadonly() {
		// An image is shared by every container that mounts it.
		return invalidf("config.mounts.readonly", "image volume %s must be read-only", m.GetContainerPath())
	}
	if p := m.GetImageSubPath(); p != "" {
		if filepath.IsAbs(p) {
			return invalidf("config.mounts.image_sub_path", "%q must be relative to the image's root", p)
		}
		if err := validateCleanPath("config.mounts.image_sub_path", p); err != nil {
			return err
		}
	}
	return validatePropagation(m.GetPropagation())
}

func validateLinuxContainerConfig(l *runtime.LinuxContainerConfig) error {
	if l == nil {
		return nil
	}
	if err := validateResources("config.linux.resources", l.GetResources()); err != nil {
		return err
	}
	sc := l.GetSecurityContext()
	if sc == nil {
		return nil
	}
	if err := validateNamespaceOptions("config.linux.security_context.namespace_options", sc.GetNamespaceOptions()); err != nil {
		return err
	}
	if err := validateUnsupportedSecurity("config.linux.security_context", sc.GetSupplementalGroupsPolicy(), sc.GetSelinuxOptions()); err != nil {
		return err
	}
	if len(sc.GetCapabilities().GetAddAmbientCapabilities()) > 0 {
		return invalidf("config.linux.security_context.capabilities.add_ambient_capabilities", "ambient capabilities are not supported by minicri")
	}
	if err := validateEach(validateSecurityProfile, []named[*runtime.SecurityProfile]{
		{"config.linux.security_context.seccomp", sc.GetSeccomp()},
		{"config.linux.security_context.apparmor", sc.GetApparmor()},
	}); err != nil {
		return err
	}
	if err := validateSeccompPaths(sc); err != nil {
		return err
	}
	if err := validatePrintable("config.linux.security_context.apparmor_profile", sc.GetApparmorProfile()); err != nil {
		return err
	}
	if err := validatePrintable("config.linux.security_context.run_as_username", sc.GetRunAsUsername()); err != nil {
		return err
	}
	if err := validateEach(validateContainerPaths, []named[[]string]{
		{"config.linux.security_context.masked_paths", sc.GetMaskedPaths()},
		{"config.linux.security_context.readonly_paths", sc.GetReadonlyPaths()},
	}); err != nil {
		return err
	}
	if err := validateEach(validateStrings, []named[[]string]{
		{"config.linux.security_context.capabilities.add_capabilities", sc.GetCapabilities().GetAddCapabilities()},
		{"config.linux.security_context.capabilities.drop_capabilities", sc.GetCapabilities().GetDropCapabilities()},
	}); err != nil {
		return err
	}
	hasUser := sc.GetRunAsUser() != nil || sc.GetRunAsUsername() != ""
	return validateRunAs(sc.GetRunAsUser(), sc.GetRunAsGroup(), sc.GetSupplementalGroups(), hasUser, "run_as_user or run_as_username")
}

// validateLinuxID checks a uid or gid: 32 bits, and not (uid_t)-1, which
// the kernel reads as "unchanged".
func validateLinuxID(field string, v int64) error {
	if v < 0 {
		return invalidf(field, "must not be negative (%d)", v)
	}
	if v >= 1<<32-1 {
		return invalidf(field, "%d is not a Linux user or group ID", v)
	}
	return nil
}

// validateSeccompPaths checks the seccomp profile files a container config
// names: the kubelet sends absolute paths to the node's profiles, and the
// daemon reads them, so nothing relative or walking up is accepted.
func validateSeccompPaths(sc *runtime.LinuxContainerSecurityContext) error {
	if p := sc.GetSeccomp(); p.GetProfileType() == runtime.SecurityProfile_Localhost {
		if err := validateHostPath("config.linux.security_context.seccomp.localhost_ref", p.GetLocalhostRef()); err != nil {
			return err
		}
	}
	old := sc.GetSeccompProfilePath()
	if ref, ok := strings.CutPrefix(old, "localhost/"); ok {
		return validateHostPath("config.linux.security_context.seccomp_profile_path", ref)
	}
	return validatePrintable("config.linux.security_context.seccomp_profile_path", old)
}

// resolveSandbox finds the full ID of the sandbox a request names by ID or
// unique prefix.
func (s *Server) resolveSandbox(field, id string) (string, error) {
	if err := requireID(field, id); err != nil {
		return "", err
	}
	return s.sandboxes.Resolve(id)
}

// resolveContainer finds the full ID of the container a request names by ID
// or unique prefix.
func (s *Server) resolveContainer(field, id string) (string, error) {
	if err := requireID(field, id); err != nil {
		return "", err
	}
	return s.containers.Resolve(id)
}

// lookupContainer is resolveContainer and the record it names.
func (s *Server) lookupContainer(id string) (containerRecord, error) {
	full, err := s.resolveContainer("container_id", id)
	if err != nil {
		return containerRecord{}, err
	}
	return s.containers.Get(full)
}

// lookupSandbox is resolveSandbox and the record it names.
func (s *Server) lookupSandbox(id string) (sandboxRecord, error) {
	full, err := s.resolveSandbox("pod_sandbox_id", id)
	if err != nil {
		return sandboxRecord{}, err
	}
	return s.sandboxes.Get(full)
}

// requireID checks an object ID from a request before it is looked up. Only
// an empty ID is malformed: any other string that names no record is
// NotFound, whatever its characters, as containerd answers (its ID index
// finds nothing for it), so that Stop and Remove of it succeed as the CRI
// asks and a status call answers NotFound. Clients other than the kubelet
// send UUIDs or names. Such a string never reaches a file name: it is only
// compared with the IDs in memory, and only the full ID of a record found
// there is used in a path.
func requireID(field, id string) error {
	if id == "" {
		return invalidf(field, "must not be empty")
	}
	if !isID(id) {
		return fmt.Errorf("%s %.80q: %w", field, id, store.ErrNotFound)
	}
	return nil
}

// isID reports whether s can be (a prefix of) an ID minicri made: 64
// hexadecimal digits at most. Only such strings are used in file names.
func isID(s string) bool {
	return s != "" && len(s) <= 64 && strings.Trim(s, "0123456789abcdefABCDEF") == ""
}

// requestedImage is the image reference an image call names (its
// image.image), checked.
func requestedImage(spec *runtime.ImageSpec) (string, error) {
	ref := spec.GetImage()
	return ref, validateImageRef("image.image", ref)
}

// validateImageRef checks an image reference (or an image ID, which the
// kubelet also sends) before it reaches a registry client or a file name,
// with the grammar PullImage parses it by.
func validateImageRef(field, ref string) error {
	if ref == "" {
		return invalidf(field, "must name an image")
	}
	if len(ref) > maxValueLen {
		return invalidf(field, "is %d bytes, longer than %d", len(ref), maxValueLen)
	}
	if err := image.ValidateReference(ref); err != nil {
		return invalidf(field, "%v", err)
	}
	return nil
}
