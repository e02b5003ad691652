package validate

import (
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The Linux security fields that pods and containers share: namespace
// modes, run-as users and groups, security profiles, SELinux.

// NamespaceModes names a pod's namespace modes as their CRI fields are named.
func NamespaceModes(o *runtime.NamespaceOption) []Named[runtime.NamespaceMode] {
	return []Named[runtime.NamespaceMode]{{"network", o.GetNetwork()}, {"pid", o.GetPid()}, {"ipc", o.GetIpc()}}
}

func validateNamespaceMode(field string, m runtime.NamespaceMode) error {
	if _, ok := runtime.NamespaceMode_name[int32(m)]; !ok {
		return Invalidf(field, "unknown namespace mode %d", m)
	}
	return nil
}

func validateNamespaceOptions(field string, o *runtime.NamespaceOption) error {
	if o == nil {
		return nil
	}
	for _, c := range NamespaceModes(o) {
		if err := validateNamespaceMode(field+"."+c.Name, c.V); err != nil {
			return err
		}
		if c.V == runtime.NamespaceMode_TARGET && c.Name != "pid" {
			return Invalidf(field+"."+c.Name, "TARGET is a PID namespace mode only")
		}
	}
	if o.GetPid() == runtime.NamespaceMode_TARGET && o.GetTargetId() == "" {
		return Invalidf(field+".target_id", "must name the target container of PID mode TARGET")
	}
	return validateUserNamespace(field+".userns_options", o.GetUsernsOptions())
}

// validateUnsupportedSecurity refuses the security context fields that
// minicri cannot honour, when they ask for something other than the
// default the kubelet sends.
func validateUnsupportedSecurity(field string, p runtime.SupplementalGroupsPolicy, labels *runtime.SELinuxOption, selinux bool) error {
	switch p {
	case runtime.SupplementalGroupsPolicy_Merge:
		// The CRI's default, and containerd's behaviour when unset: the
		// image's /etc/group memberships are merged in (oci.ResolveUser).
	case runtime.SupplementalGroupsPolicy_Strict:
		// Only the pod's groups: the image's /etc/group is left out
		// (oci.ResolveUserStrict).
	default:
		return Invalidf(field+".supplemental_groups_policy", "unknown policy %d", p)
	}
	if labels != nil && selinux {
		return Invalidf(field+".selinux_options", "SELinux labels are not supported by minicri, and this host runs SELinux")
	}
	return nil
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
			return Invalidf(field+".localhost_ref", "must name a profile for a Localhost profile")
		}
		return Printable(field+".localhost_ref", p.GetLocalhostRef())
	default:
		return Invalidf(field+".profile_type", "unknown profile type %d", p.GetProfileType())
	}
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
			return Invalidf("config.linux.security_context.run_as_group", "is set without %s", userFields)
		}
	}
	for _, g := range groups {
		if err := validateLinuxID("config.linux.security_context.supplemental_groups", g); err != nil {
			return err
		}
	}
	return nil
}

// validateLinuxID checks a uid or gid: 32 bits, and not (uid_t)-1, which
// the kernel reads as "unchanged".
func validateLinuxID(field string, v int64) error {
	if v < 0 {
		return Invalidf(field, "must not be negative (%d)", v)
	}
	if v >= 1<<32-1 {
		return Invalidf(field, "%d is not a Linux user or group ID", v)
	}
	return nil
}
