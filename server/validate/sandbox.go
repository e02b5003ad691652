package validate

import (
	"net"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The field rules of a pod's config (RunPodSandbox).

// SandboxConfig checks every field of a RunPodSandbox config that
// minicri reads, naming the first bad one; selinux says whether the host
// runs SELinux.
func SandboxConfig(c *runtime.PodSandboxConfig, selinux bool) error {
	if c == nil {
		return Invalidf("config", "is required")
	}
	m := c.GetMetadata()
	if m == nil {
		return Invalidf("config.metadata", "is required")
	}
	if err := validateEach(validateName, []Named[string]{
		{"config.metadata.name", m.GetName()},
		{"config.metadata.namespace", m.GetNamespace()},
		{"config.metadata.uid", m.GetUid()},
	}); err != nil {
		return err
	}
	if h := c.GetHostname(); len(h) > MaxHostnameLen {
		return Invalidf("config.hostname", "is %d bytes, longer than %d", len(h), MaxHostnameLen)
	} else if strings.ContainsAny(h, " /\t\n\x00") || Printable("config.hostname", h) != nil {
		return Invalidf("config.hostname", "%q is not a host name", h)
	}
	if d := c.GetLogDirectory(); d != "" {
		if err := validateHostPath("config.log_directory", d); err != nil {
			return err
		}
	}
	if dns := c.GetDnsConfig(); dns != nil {
		for _, l := range []Named[[]string]{{"config.dns_config.servers", dns.GetServers()}, {"config.dns_config.searches", dns.GetSearches()}, {"config.dns_config.options", dns.GetOptions()}} {
			if err := validateStrings(l.Name, l.V); err != nil {
				return err
			}
			for _, v := range l.V {
				if strings.ContainsAny(v, " \t") && l.Name != "config.dns_config.options" {
					return Invalidf(l.Name, "%q must not contain spaces", v)
				}
			}
		}
		for _, server := range dns.GetServers() {
			if net.ParseIP(server) == nil {
				return Invalidf("config.dns_config.servers", "%q is not an IP address", server)
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
	return validateLinuxSandboxConfig(c.GetLinux(), selinux)
}

func validatePortMapping(p *runtime.PortMapping) error {
	if p == nil {
		return Invalidf("config.port_mappings", "has a null entry")
	}
	if _, ok := runtime.Protocol_name[int32(p.GetProtocol())]; !ok {
		return Invalidf("config.port_mappings.protocol", "unknown protocol %d", p.GetProtocol())
	}
	if p.GetContainerPort() <= 0 || p.GetContainerPort() > 65535 {
		return Invalidf("config.port_mappings.container_port", "%d is not a port", p.GetContainerPort())
	}
	if p.GetHostPort() < 0 || p.GetHostPort() > 65535 {
		return Invalidf("config.port_mappings.host_port", "%d is not a port", p.GetHostPort())
	}
	if ip := p.GetHostIp(); ip != "" && net.ParseIP(ip) == nil {
		return Invalidf("config.port_mappings.host_ip", "%q is not an IP address", ip)
	}
	return nil
}

func validateLinuxSandboxConfig(l *runtime.LinuxPodSandboxConfig, selinux bool) error {
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
			return Invalidf("config.linux.sysctls", "%q is not a sysctl name", k)
		}
		if err := Printable("config.linux.sysctls["+k+"]", v); err != nil {
			return err
		}
	}
	sc := l.GetSecurityContext()
	if err := validateNamespaceOptions("config.linux.security_context.namespace_options", sc.GetNamespaceOptions()); err != nil {
		return err
	}
	if sc.GetNamespaceOptions().GetPid() == runtime.NamespaceMode_TARGET {
		return Invalidf("config.linux.security_context.namespace_options.pid", "TARGET is for a container, not a pod")
	}
	if err := validateUnsupportedSecurity("config.linux.security_context", sc.GetSupplementalGroupsPolicy(), sc.GetSelinuxOptions(), selinux); err != nil {
		return err
	}
	if err := validateSecurityProfile("config.linux.security_context.seccomp", sc.GetSeccomp()); err != nil {
		return err
	}
	if err := validateSandboxUser(sc); err != nil {
		return err
	}
	if err := Resources("config.linux.resources", l.GetResources()); err != nil {
		return err
	}
	return Resources("config.linux.overhead", l.GetOverhead())
}

// validateSandboxUser checks the pod-level user, which has no user name:
// containerd builds the sandbox's user with the same rule as a container's,
// so a group without a user is refused there too.
func validateSandboxUser(sc *runtime.LinuxSandboxSecurityContext) error {
	return validateRunAs(sc.GetRunAsUser(), sc.GetRunAsGroup(), sc.GetSupplementalGroups(), sc.GetRunAsUser() != nil, "run_as_user")
}
