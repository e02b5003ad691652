package validate

import (
	"bytes"
	"path/filepath"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"
)

// The field rules of a container's config (CreateContainer) and of its
// resources (UpdateContainerResources too).

// ContainerInPod refuses a container that asks for the host's
// network or IPC namespace in a pod that has its own: a container shares
// its pod's, and handing it the pod's instead would drop what it asked for.
// The kubelet always sends the pod's modes. kernelUserNamespaces says why
// this kernel cannot run a pod in a user namespace, or nil: the one answer
// of the host a container's rules need, asked only of a pod that has one.
func ContainerInPod(sbCfg *runtime.PodSandboxConfig, c *runtime.ContainerConfig, kernelUserNamespaces func() error) error {
	pod := sbCfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	ctr := c.GetLinux().GetSecurityContext().GetNamespaceOptions()
	const field = "config.linux.security_context.namespace_options"
	if ctr.GetNetwork() == runtime.NamespaceMode_NODE && pod.GetNetwork() != runtime.NamespaceMode_NODE {
		return Invalidf(field+".network", "NODE in a pod with a network of its own: a container shares its pod's network")
	}
	if ctr.GetIpc() == runtime.NamespaceMode_NODE && pod.GetIpc() != runtime.NamespaceMode_NODE {
		return Invalidf(field+".ipc", "NODE in a pod with an IPC namespace of its own: a container shares its pod's")
	}
	return validateContainerUserNamespace(sbCfg, c, kernelUserNamespaces)
}

// Resources refuses negative limits; zero means "not set" in the CRI.
func Resources(field string, r *runtime.LinuxContainerResources) error {
	if r == nil {
		return nil
	}
	for _, v := range []Named[int64]{
		{"cpu_period", r.GetCpuPeriod()}, {"cpu_shares", r.GetCpuShares()},
		{"memory_limit_in_bytes", r.GetMemoryLimitInBytes()},
	} {
		if v.V < 0 {
			return Invalidf(field+"."+v.Name, "must not be negative (%d)", v.V)
		}
	}
	if q := r.GetCpuQuota(); q < -1 {
		return Invalidf(field+".cpu_quota", "must be -1 (unlimited) or more (%d)", q)
	} else if q > 0 && q < 1000 {
		return Invalidf(field+".cpu_quota", "%d is below the kernel's minimum of 1000 microseconds", q)
	}
	// The kernel's bounds: 1 ms to 1 s. runc would fail with less to go on.
	if p := r.GetCpuPeriod(); p != 0 && (p < 1000 || p > 1000000) {
		return Invalidf(field+".cpu_period", "%d is outside 1000..1000000 microseconds", p)
	}
	if s := r.GetMemorySwapLimitInBytes(); s < -1 {
		return Invalidf(field+".memory_swap_limit_in_bytes", "must be -1 (unlimited) or more (%d)", s)
	}
	if a := r.GetOomScoreAdj(); a < -1000 || a > 1000 {
		return Invalidf(field+".oom_score_adj", "%d is outside -1000..1000", a)
	}
	for _, s := range []Named[string]{{"cpuset_cpus", r.GetCpusetCpus()}, {"cpuset_mems", r.GetCpusetMems()}} {
		if strings.Trim(s.V, "0123456789,-") != "" {
			return Invalidf(field+"."+s.Name, "%q is not a CPU or node list like 0-3,5", s.V)
		}
	}
	for _, h := range r.GetHugepageLimits() {
		if h.GetPageSize() == "" || strings.ContainsAny(h.GetPageSize(), "/.") {
			return Invalidf(field+".hugepage_limits.page_size", "%q is not a page size like 2MB", h.GetPageSize())
		}
	}
	for k := range r.GetUnified() {
		// Each key is a file name in the container's cgroup directory.
		if strings.ContainsAny(k, "/\x00") || k == "." || k == ".." {
			return Invalidf(field+".unified", "%q is not a cgroup file name", k)
		}
	}
	return Map(field+".unified", r.GetUnified())
}

// ContainerConfig checks every field of a CreateContainer config that
// minicri reads; selinux says whether the host runs SELinux.
func ContainerConfig(c *runtime.ContainerConfig, selinux bool) error {
	if c == nil {
		return Invalidf("config", "is required")
	}
	if c.GetMetadata() == nil {
		return Invalidf("config.metadata", "is required")
	}
	if err := validateName("config.metadata.name", c.GetMetadata().GetName()); err != nil {
		return err
	}
	if c.GetImage().GetImage() == "" {
		return Invalidf("config.image.image", "must name an image")
	}
	if err := ImageRef("config.image.image", c.GetImage().GetImage()); err != nil {
		return err
	}
	if lp := c.GetLogPath(); lp != "" {
		if filepath.IsAbs(lp) {
			return Invalidf("config.log_path", "%q must be relative to the sandbox's log_directory", lp)
		}
		if err := validateCleanPath("config.log_path", lp); err != nil {
			return err
		}
	}
	if err := validateEach(validateArgs, []Named[[]string]{{"config.command", c.GetCommand()}, {"config.args", c.GetArgs()}}); err != nil {
		return err
	}
	if wd := c.GetWorkingDir(); wd != "" && !filepath.IsAbs(wd) {
		return Invalidf("config.working_dir", "%q must be an absolute path", wd)
	} else if err := Printable("config.working_dir", wd); err != nil {
		return err
	}
	for _, e := range c.GetEnvs() {
		if e.GetKey() == "" || strings.ContainsAny(e.GetKey(), "=\x00") {
			return Invalidf("config.envs", "%q is not a variable name", e.GetKey())
		}
		if len(e.GetKey())+len(e.GetValue()) >= maxArgLen {
			return Invalidf("config.envs["+e.GetKey()+"]", "is %d bytes, longer than %d", len(e.GetValue()), maxArgLen)
		}
		if bytes.IndexByte(e.GetValue(), 0) >= 0 {
			return Invalidf("config.envs["+e.GetKey()+"]", "must not contain NUL")
		}
	}
	if len(c.GetMounts()) > maxListLen || len(c.GetDevices()) > maxListLen {
		return Invalidf("config.mounts", "%d mounts and %d devices: more than %d", len(c.GetMounts()), len(c.GetDevices()), maxListLen)
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
			return Invalidf("config.devices.permissions", "%q must be made of r, w and m", d.GetPermissions())
		}
	}
	for _, m := range c.GetMounts() {
		if err := validateMountSupported(m, selinux); err != nil {
			return err
		}
	}
	if len(c.GetCDIDevices()) > maxListLen {
		return Invalidf("config.CDI_devices", "has %d entries, more than %d", len(c.GetCDIDevices()), maxListLen)
	}
	for _, r := range CDIRequests(c) {
		if !cdiparser.IsQualifiedName(r.Device) {
			return Invalidf(r.Field, "%q is not a CDI device name (vendor.com/class=name)", r.Device)
		}
	}
	if err := validateLabelsAndAnnotations(c.GetLabels(), c.GetAnnotations()); err != nil {
		return err
	}
	if _, ok := runtime.Signal_name[int32(c.GetStopSignal())]; !ok {
		return Invalidf("config.stop_signal", "unknown signal %d", c.GetStopSignal())
	}
	return validateLinuxContainerConfig(c.GetLinux(), selinux)
}

func validateLinuxContainerConfig(l *runtime.LinuxContainerConfig, selinux bool) error {
	if l == nil {
		return nil
	}
	if err := Resources("config.linux.resources", l.GetResources()); err != nil {
		return err
	}
	sc := l.GetSecurityContext()
	if sc == nil {
		return nil
	}
	if err := validateNamespaceOptions("config.linux.security_context.namespace_options", sc.GetNamespaceOptions()); err != nil {
		return err
	}
	if err := validateUnsupportedSecurity("config.linux.security_context", sc.GetSupplementalGroupsPolicy(), sc.GetSelinuxOptions(), selinux); err != nil {
		return err
	}
	if len(sc.GetCapabilities().GetAddAmbientCapabilities()) > 0 {
		return Invalidf("config.linux.security_context.capabilities.add_ambient_capabilities", "ambient capabilities are not supported by minicri")
	}
	if err := validateEach(validateSecurityProfile, []Named[*runtime.SecurityProfile]{
		{"config.linux.security_context.seccomp", sc.GetSeccomp()},
		{"config.linux.security_context.apparmor", sc.GetApparmor()},
	}); err != nil {
		return err
	}
	if err := validateSeccompPaths(sc); err != nil {
		return err
	}
	if err := Printable("config.linux.security_context.apparmor_profile", sc.GetApparmorProfile()); err != nil {
		return err
	}
	if err := Printable("config.linux.security_context.run_as_username", sc.GetRunAsUsername()); err != nil {
		return err
	}
	if err := validateEach(validateContainerPaths, []Named[[]string]{
		{"config.linux.security_context.masked_paths", sc.GetMaskedPaths()},
		{"config.linux.security_context.readonly_paths", sc.GetReadonlyPaths()},
	}); err != nil {
		return err
	}
	if err := validateEach(validateStrings, []Named[[]string]{
		{"config.linux.security_context.capabilities.add_capabilities", sc.GetCapabilities().GetAddCapabilities()},
		{"config.linux.security_context.capabilities.drop_capabilities", sc.GetCapabilities().GetDropCapabilities()},
	}); err != nil {
		return err
	}
	hasUser := sc.GetRunAsUser() != nil || sc.GetRunAsUsername() != ""
	return validateRunAs(sc.GetRunAsUser(), sc.GetRunAsGroup(), sc.GetSupplementalGroups(), hasUser, "run_as_user or run_as_username")
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
	return Printable("config.linux.security_context.seccomp_profile_path", old)
}
