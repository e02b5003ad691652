package oci

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// GenerateSpec builds the container's OCI spec, the way containerd's CRI plugin
// does, from the plain description c.
//
// Host facts bound some values: oom_score_adj is raised to the daemon's own and
// RLIMIT_NOFILE lowered to the daemon's hard limit (the runtime cannot do
// better without CAP_SYS_RESOURCE); capabilities are limited to the daemon's
// bounding set; AppArmor applies only when the host has it; the cgroup namespace
// is new on cgroup v2 only. Host device paths and mount sources are read, and a
// missing mount source directory is created.
func GenerateSpec(c ContainerSpec) (*specs.Spec, error) {
	return generateSpec(&c, currentHost())
}

// specVersion is the runtime-spec version the generated specs claim. Every
// field written here exists in 1.1.0, and crun 1.8 (Debian 12) refuses a
// config.json of a later version than it knows.
const specVersion = "1.1.0"

// specSteps fill the spec in order; each reads c and the host facts.
var specSteps = []func(*specs.Spec, *ContainerSpec, hostFacts) error{
	setProcess,
	setSecurity,
	setMounts,
	setNamespaces,
	setUserNamespace,
	setResources,
	setDevices,
	setCgroupsPath,
}

func generateSpec(c *ContainerSpec, h hostFacts) (*specs.Spec, error) {
	if err := validateContainerSpec(c); err != nil {
		return nil, err
	}
	s := &specs.Spec{
		Version:     specVersion,
		Root:        &specs.Root{Path: c.Rootfs, Readonly: c.Security.ReadonlyRootfs},
		Annotations: maps.Clone(c.Annotations),
		Linux:       &specs.Linux{Sysctl: maps.Clone(c.Sysctls)},
	}
	if c.Namespaces.UTS.Mode != NamespaceHost {
		// The runtime cannot set a hostname without a UTS namespace of its own.
		s.Hostname = c.Hostname
	}
	for _, step := range specSteps {
		if err := step(s, c, h); err != nil {
			return nil, fmt.Errorf("generate spec for container %s: %w", c.ID, err)
		}
	}
	return s, nil
}

func validateContainerSpec(c *ContainerSpec) error {
	switch {
	case c.ID == "" || strings.ContainsAny(c.ID, "/\x00") || c.ID == "." || c.ID == "..":
		return fmt.Errorf("%w: container ID %q", ErrInvalid, c.ID)
	case !path.IsAbs(c.Rootfs):
		return fmt.Errorf("%w: rootfs path %q is not absolute", ErrInvalid, c.Rootfs)
	case len(c.Args) == 0:
		return fmt.Errorf("%w: container %s has empty args", ErrNoCommand, c.ID)
	case c.Cwd != "" && !path.IsAbs(c.Cwd):
		return fmt.Errorf("%w: working directory %q is not absolute", ErrInvalid, c.Cwd)
	}
	return nil
}

func setProcess(s *specs.Spec, c *ContainerSpec, h hostFacts) error {
	env := slices.Clone(c.Env)
	if c.Hostname != "" {
		env = withDefaultEnv(env, "HOSTNAME", c.Hostname)
	}
	if c.User.Home != "" {
		env = withDefaultEnv(env, "HOME", c.User.Home)
	}
	cwd := c.Cwd
	if cwd == "" {
		cwd = "/"
	}
	rlimits := c.Rlimits
	if rlimits == nil {
		rlimits = defaultRlimits(h)
	}
	s.Process = &specs.Process{
		Terminal: c.Terminal,
		User: specs.User{
			UID:            c.User.UID,
			GID:            c.User.GID,
			AdditionalGids: slices.Clone(c.User.AdditionalGids),
		},
		Args:    slices.Clone(c.Args),
		Env:     env,
		Cwd:     cwd,
		Rlimits: slices.Clone(rlimits),
	}
	if c.Resources != nil {
		adj := oomScoreAdj(c.Resources.OomScoreAdj, h)
		s.Process.OOMScoreAdj = &adj
	}
	return nil
}

// setSecurity applies capabilities, no_new_privs, AppArmor, seccomp and the
// masked and read-only paths. Privileged containers get every capability the
// daemon holds and no seccomp filter, masks or read-only paths.
func setSecurity(s *specs.Spec, c *ContainerSpec, h hostFacts) error {
	caps, err := capabilities(c.Security, h)
	if err != nil {
		return err
	}
	names := caps.names()
	s.Process.Capabilities = &specs.LinuxCapabilities{
		Bounding:  names,
		Effective: slices.Clone(names),
		Permitted: slices.Clone(names),
	}
	s.Process.NoNewPrivileges = c.Security.NoNewPrivs
	if s.Process.ApparmorProfile, err = appArmorFor(c.Security, h); err != nil {
		return err
	}
	if s.Linux.Seccomp, err = seccompFor(c.Security, caps); err != nil {
		return err
	}
	if !c.Security.Privileged {
		s.Linux.MaskedPaths = pathsOrDefault(c.Security.MaskedPaths, DefaultMaskedPaths)
		s.Linux.ReadonlyPaths = pathsOrDefault(c.Security.ReadonlyPaths, DefaultReadonlyPaths)
	}
	return nil
}

func pathsOrDefault(given, defaults []string) []string {
	if given == nil {
		return slices.Clone(defaults)
	}
	return slices.Clone(given)
}

func setMounts(s *specs.Spec, c *ContainerSpec, h hostFacts) error {
	mounts, err := mountsFor(c, h)
	if err != nil {
		return err
	}
	s.Mounts = mounts
	s.Linux.RootfsPropagation = rootfsPropagation(c.Mounts)
	return nil
}

// The one-field steps assign before they check err: generateSpec drops the
// whole spec on an error.
func setNamespaces(s *specs.Spec, c *ContainerSpec, h hostFacts) (err error) {
	s.Linux.Namespaces, err = namespacesFor(c.Namespaces, h)
	return err
}

func setResources(s *specs.Spec, c *ContainerSpec, h hostFacts) (err error) {
	s.Linux.Resources, err = resourcesFor(c.Resources, h)
	return err
}

// setDevices runs after setResources: the device rules live in the resources.
func setDevices(s *specs.Spec, c *ContainerSpec, _ hostFacts) error {
	nodes, rules, err := devicesFor(c)
	if err != nil {
		return err
	}
	s.Linux.Devices = nodes
	s.Linux.Resources.Devices = rules
	return nil
}

func setCgroupsPath(s *specs.Spec, c *ContainerSpec, _ hostFacts) (err error) {
	s.Linux.CgroupsPath, err = CgroupsPath(c.CgroupParent, c.ID, c.CgroupDriver)
	return err
}
