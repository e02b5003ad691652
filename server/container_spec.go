package server

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/podsandbox"
)

// containerSpec translates a CRI container config, its sandbox and its image
// into the plain description the oci package turns into config.json.
// volumeSources are the host paths of the image volumes, by mount index.
func (s *Server) containerSpec(id, rootfs string, sb lifecycle.SandboxRecord, sbCfg *runtime.PodSandboxConfig, cfg *runtime.ContainerConfig, img image.Image, refs createRefs, volumeSources map[int]string) (oci.ContainerSpec, error) {
	args, err := oci.ResolveArgs(img.Config.Entrypoint, img.Config.Cmd, cfg.GetCommand(), cfg.GetArgs())
	if err != nil {
		return oci.ContainerSpec{}, err
	}
	sc := cfg.GetLinux().GetSecurityContext()
	user, err := resolveUser(rootfs, img, sc)
	if err != nil {
		return oci.ContainerSpec{}, err
	}
	cwd := cfg.GetWorkingDir()
	if cwd == "" {
		cwd = img.Config.WorkingDir
	}
	env := make([]oci.KeyValue, 0, len(cfg.GetEnvs()))
	for _, e := range cfg.GetEnvs() {
		env = append(env, oci.KeyValue{Key: e.GetKey(), Value: string(e.GetValue())})
	}
	spec := oci.ContainerSpec{
		ID:             id,
		Rootfs:         rootfs,
		Args:           args,
		Env:            oci.MergeEnv(img.Config.Env, env),
		Cwd:            cwd,
		User:           user,
		Terminal:       cfg.GetTty(),
		Stdin:          cfg.GetStdin(),
		Hostname:       podsandbox.Hostname(sbCfg),
		Mounts:         ociMounts(cfg.GetMounts(), volumeSources),
		Devices:        ociDevices(cfg.GetDevices()),
		Resources:      ociResources(cfg.GetLinux().GetResources()),
		Security:       ociSecurity(sc),
		Namespaces:     containerNamespaces(sb, sbCfg, sc, refs.targetPIDNS),
		Sysctls:        sbCfg.GetLinux().GetSysctls(),
		Annotations:    cfg.GetAnnotations(),
		CgroupParent:   sbCfg.GetLinux().GetCgroupParent(),
		CgroupDriver:   oci.CgroupDriver(s.cfg.CgroupDriver),
		HostsPath:      filepath.Join(sb.Dir, "hosts"),
		ResolvConfPath: filepath.Join(sb.Dir, "resolv.conf"),
		HostnamePath:   filepath.Join(sb.Dir, "hostname"),
	}
	if sb.ShmMounted {
		spec.ShmPath = filepath.Join(sb.Dir, "shm")
	} else if podsandbox.HostIPC(sbCfg) {
		spec.ShmPath = "/dev/shm"
	}
	return spec, nil
}

// resolveUser finds the process's identity in the image.
func resolveUser(rootfs string, img image.Image, sc *runtime.LinuxContainerSecurityContext) (oci.User, error) {
	var runAsUser, runAsGroup *int64
	if v := sc.GetRunAsUser(); v != nil {
		u := v.GetValue()
		runAsUser = &u
	}
	if v := sc.GetRunAsGroup(); v != nil {
		g := v.GetValue()
		runAsGroup = &g
	}
	resolve := oci.ResolveUser
	if sc.GetSupplementalGroupsPolicy() == runtime.SupplementalGroupsPolicy_Strict {
		resolve = oci.ResolveUserStrict
	}
	user, err := resolve(rootfs, img.Config.User, runAsUser, sc.GetRunAsUsername(), runAsGroup, sc.GetSupplementalGroups())
	if err != nil {
		return oci.User{}, err
	}
	// runAsNonRoot is not in the CRI: the kubelet checks it itself, from
	// the image's user in ImageStatus.
	return user, nil
}

// ociMounts turns the CRI mounts into bind mounts; an image volume binds
// its mounted image, from volumeSources (by mount index), read-only (as
// validated) and inert (nosuid, nodev): a setuid binary of the image must
// not run as root in a container of another user. Its binaries may run:
// KEP-4639 dropped noexec from image volumes (kubernetes/enhancements#5354),
// and cri-tools checks that a binary of the volume runs.
func ociMounts(mounts []*runtime.Mount, volumeSources map[int]string) []oci.Mount {
	out := make([]oci.Mount, 0, len(mounts))
	for i, m := range mounts {
		hostPath := m.GetHostPath()
		source, imageVolume := volumeSources[i]
		if imageVolume {
			hostPath = source
		}
		p := oci.PropagationPrivate
		switch m.GetPropagation() {
		case runtime.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
			p = oci.PropagationHostToContainer
		case runtime.MountPropagation_PROPAGATION_BIDIRECTIONAL:
			p = oci.PropagationBidirectional
		}
		out = append(out, oci.Mount{
			ContainerPath:     m.GetContainerPath(),
			HostPath:          hostPath,
			Readonly:          m.GetReadonly(),
			RecursiveReadOnly: m.GetRecursiveReadOnly(),
			Inert:             imageVolume,
			Options:           m.GetMountOptions(),
			Propagation:       p,
			SelinuxRelabel:    m.GetSelinuxRelabel(),
		})
	}
	return out
}

func ociDevices(devices []*runtime.Device) []oci.Device {
	out := make([]oci.Device, 0, len(devices))
	for _, d := range devices {
		out = append(out, oci.Device{HostPath: d.GetHostPath(), ContainerPath: d.GetContainerPath(), Permissions: d.GetPermissions()})
	}
	return out
}

func ociResources(r *runtime.LinuxContainerResources) *oci.Resources {
	if r == nil {
		return nil
	}
	out := &oci.Resources{
		CPUShares:            r.GetCpuShares(),
		CPUQuota:             r.GetCpuQuota(),
		CPUPeriod:            r.GetCpuPeriod(),
		CpusetCpus:           r.GetCpusetCpus(),
		CpusetMems:           r.GetCpusetMems(),
		MemoryLimitBytes:     r.GetMemoryLimitInBytes(),
		MemorySwapLimitBytes: r.GetMemorySwapLimitInBytes(),
		OomScoreAdj:          r.GetOomScoreAdj(),
		Unified:              r.GetUnified(),
	}
	for _, h := range r.GetHugepageLimits() {
		out.HugepageLimits = append(out.HugepageLimits, oci.HugepageLimit{PageSize: h.GetPageSize(), Limit: h.GetLimit()})
	}
	return out
}

func ociSecurity(sc *runtime.LinuxContainerSecurityContext) oci.Security {
	return oci.Security{
		Privileged:       sc.GetPrivileged(),
		AddCapabilities:  sc.GetCapabilities().GetAddCapabilities(),
		DropCapabilities: sc.GetCapabilities().GetDropCapabilities(),
		NoNewPrivs:       sc.GetNoNewPrivs(),
		ReadonlyRootfs:   sc.GetReadonlyRootfs(),
		MaskedPaths:      sc.GetMaskedPaths(),
		ReadonlyPaths:    sc.GetReadonlyPaths(),
		Seccomp:          seccompProfile(sc),
		AppArmor:         appArmorProfile(sc),
	}
}

// seccompProfile reads the structured field, falling back to the deprecated
// string form older kubelets send.
func seccompProfile(sc *runtime.LinuxContainerSecurityContext) oci.SeccompProfile {
	typ, path := securityProfile(sc.GetSeccomp(), sc.GetSeccompProfilePath(), oci.ProfileUnset, "runtime/default", "docker/default")
	return oci.SeccompProfile{Type: typ, LocalhostPath: path}
}

// appArmorProfile tells an explicit Unconfined from no profile at all: a
// container that names none gets the default profile (as with containerd).
func appArmorProfile(sc *runtime.LinuxContainerSecurityContext) oci.AppArmorProfile {
	typ, name := securityProfile(sc.GetApparmor(), sc.GetApparmorProfile(), oci.ProfileUnconfined, "runtime/default")
	return oci.AppArmorProfile{Type: typ, LocalhostName: name}
}

// securityProfile maps a CRI profile, structured or else in the deprecated
// string form, to a type and the localhost reference. other is what any
// other structured type or string means (such as "unconfined"); defaults are
// the strings that name the runtime default.
func securityProfile(p *runtime.SecurityProfile, deprecated string, other oci.ProfileType, defaults ...string) (oci.ProfileType, string) {
	if p != nil {
		switch p.GetProfileType() {
		case runtime.SecurityProfile_RuntimeDefault:
			return oci.ProfileRuntimeDefault, ""
		case runtime.SecurityProfile_Localhost:
			return oci.ProfileLocalhost, p.GetLocalhostRef()
		}
		return other, ""
	}
	switch {
	case deprecated == "":
		return oci.ProfileUnset, ""
	case slices.Contains(defaults, deprecated):
		return oci.ProfileRuntimeDefault, ""
	case strings.HasPrefix(deprecated, "localhost/"):
		return oci.ProfileLocalhost, strings.TrimPrefix(deprecated, "localhost/")
	}
	return other, ""
}

// containerNamespaces joins the pod's pinned namespaces, or the host's where
// the pod asked for them. PID: the host's, the pod's (its infra process's),
// a target container's (targetPIDNS, see targetPIDNamespace), or one of the
// container's own.
func containerNamespaces(sb lifecycle.SandboxRecord, sbCfg *runtime.PodSandboxConfig, sc *runtime.LinuxContainerSecurityContext, targetPIDNS string) oci.Namespaces {
	join := func(path string) oci.Namespace {
		if path == "" {
			return oci.Namespace{Mode: oci.NamespaceHost}
		}
		return oci.Namespace{Mode: oci.NamespaceJoin, Path: path}
	}
	ns := oci.Namespaces{
		Network: join(sb.Namespaces.Net),
		IPC:     join(sb.Namespaces.IPC),
		UTS:     join(sb.Namespaces.UTS),
		User:    join(sb.Namespaces.User),
	}
	switch {
	case podsandbox.NamespaceOptions(sbCfg).GetPid() == runtime.NamespaceMode_NODE || sc.GetNamespaceOptions().GetPid() == runtime.NamespaceMode_NODE:
		ns.PID = oci.Namespace{Mode: oci.NamespaceHost}
	case sc.GetNamespaceOptions().GetPid() == runtime.NamespaceMode_TARGET:
		ns.PID = oci.Namespace{Mode: oci.NamespaceJoin, Path: targetPIDNS}
	case sc.GetNamespaceOptions().GetPid() == runtime.NamespaceMode_POD && sb.Infra.PID > 0:
		ns.PID = oci.Namespace{Mode: oci.NamespaceJoin, Path: sb.Infra.NamespacePath()}
	}
	return ns
}

// stopSignal is the signal StopContainer sends first: the config's, the
// image's, or SIGTERM.
func stopSignal(cfg *runtime.ContainerConfig, img image.Image) string {
	if sig := cfg.GetStopSignal(); sig != runtime.Signal_SIGNAL_RUNTIME_DEFAULT {
		return strings.TrimPrefix(sig.String(), "SIGNAL_")
	}
	if s := img.Config.StopSignal; s != "" {
		if !strings.HasPrefix(s, "SIG") && !isNumber(s) {
			s = "SIG" + s
		}
		return s
	}
	return "SIGTERM"
}

func isNumber(s string) bool {
	var n int
	_, err := fmt.Sscanf(s, "%d", &n)
	return err == nil
}
