package validate_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/testreq"
	"github.com/minicri/minicri/server/validate"
)

func TestValidateSandboxConfig(t *testing.T) {
	cases := []struct {
		name   string
		modify func(c *runtime.PodSandboxConfig)
		field  string // "" means valid
	}{
		{"valid", func(c *runtime.PodSandboxConfig) {}, ""},
		{"no metadata", func(c *runtime.PodSandboxConfig) { c.Metadata = nil }, "config.metadata"},
		{"empty name", func(c *runtime.PodSandboxConfig) { c.Metadata.Name = "" }, "config.metadata.name"},
		{"huge name", func(c *runtime.PodSandboxConfig) { c.Metadata.Name = strings.Repeat("a", 300) }, "config.metadata.name"},
		{"slash in namespace", func(c *runtime.PodSandboxConfig) { c.Metadata.Namespace = "../etc" }, "config.metadata.namespace"},
		{"newline in uid", func(c *runtime.PodSandboxConfig) { c.Metadata.Uid = "a\nb" }, "config.metadata.uid"},
		{"log dir traversal", func(c *runtime.PodSandboxConfig) { c.LogDirectory = "/var/log/../../etc" }, "config.log_directory"},
		{"relative log dir", func(c *runtime.PodSandboxConfig) { c.LogDirectory = "var/log" }, "config.log_directory"},
		{"dns injection", func(c *runtime.PodSandboxConfig) { c.DnsConfig.Servers = []string{"1.1.1.1\nnameserver 6.6.6.6"} }, "config.dns_config.servers"},
		{"bad port", func(c *runtime.PodSandboxConfig) { c.PortMappings[0].ContainerPort = 70000 }, "config.port_mappings.container_port"},
		{"bad protocol", func(c *runtime.PodSandboxConfig) { c.PortMappings[0].Protocol = 9 }, "config.port_mappings.protocol"},
		{"bad ns mode", func(c *runtime.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Network: 42}}
		}, "config.linux.security_context.namespace_options.network"},
		{"bad sysctl", func(c *runtime.PodSandboxConfig) { c.Linux.Sysctls = map[string]string{"a/b": "1"} }, "config.linux.sysctls"},
		{"negative memory", func(c *runtime.PodSandboxConfig) {
			c.Linux.Resources = &runtime.LinuxContainerResources{MemoryLimitInBytes: -5}
		}, "config.linux.resources.memory_limit_in_bytes"},
		{"hostname too long", func(c *runtime.PodSandboxConfig) { c.Hostname = strings.Repeat("h", 65) }, "config.hostname"},
		{"dns server not an IP", func(c *runtime.PodSandboxConfig) { c.DnsConfig.Servers = []string{"dns.example"} }, "config.dns_config.servers"},
		{"host ip not an IP", func(c *runtime.PodSandboxConfig) { c.PortMappings[0].HostIp = "localhost" }, "config.port_mappings.host_ip"},
		{"sysctl with an empty component", func(c *runtime.PodSandboxConfig) { c.Linux.Sysctls = map[string]string{"net..x": "1"} }, "config.linux.sysctls"},
		{"negative overhead", func(c *runtime.PodSandboxConfig) {
			c.Linux.Overhead = &runtime.LinuxContainerResources{CpuShares: -2}
		}, "config.linux.overhead.cpu_shares"},
		{"annotation key with a newline", func(c *runtime.PodSandboxConfig) { c.Annotations = map[string]string{"a\nb": "x"} }, "config.annotations"},
		{"pod user namespace without gid mappings", func(c *runtime.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{
				UsernsOptions: &runtime.UserNamespace{Mode: runtime.NamespaceMode_POD, Uids: []*runtime.IDMapping{{HostId: 65536, Length: 65536}}}}}
		}, "config.linux.security_context.namespace_options.userns_options.gids"},
		{"pod user namespace mode CONTAINER", func(c *runtime.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{
				UsernsOptions: &runtime.UserNamespace{Mode: runtime.NamespaceMode_CONTAINER}}}
		}, "config.linux.security_context.namespace_options.userns_options.mode"},
		{"host user namespace with mappings", func(c *runtime.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{
				UsernsOptions: &runtime.UserNamespace{Mode: runtime.NamespaceMode_NODE, Gids: []*runtime.IDMapping{{HostId: 65536, Length: 65536}}}}}
		}, "config.linux.security_context.namespace_options.userns_options.uids"},
		{"pod supplemental groups policy Strict", func(c *runtime.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{SupplementalGroupsPolicy: runtime.SupplementalGroupsPolicy_Strict}
		}, ""},
		{"pod supplemental groups policy unknown", func(c *runtime.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{SupplementalGroupsPolicy: 9}
		}, "config.linux.security_context.supplemental_groups_policy"},
		// What the kubelet sends for every ordinary pod must pass.
		{"kubelet defaults: host user namespace, Merge", func(c *runtime.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{
				NamespaceOptions:         &runtime.NamespaceOption{Pid: runtime.NamespaceMode_CONTAINER, UsernsOptions: &runtime.UserNamespace{Mode: runtime.NamespaceMode_NODE}},
				SupplementalGroupsPolicy: runtime.SupplementalGroupsPolicy_Merge,
				SelinuxOptions:           &runtime.SELinuxOption{Level: "s0:c1,c2"},
			}
		}, ""},
		{"pod PID mode TARGET", func(c *runtime.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_TARGET, TargetId: "abc"}}
		}, "config.linux.security_context.namespace_options.pid"},
		{"pod group without a user", func(c *runtime.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{RunAsGroup: &runtime.Int64Value{Value: 1000}}
		}, "config.linux.security_context.run_as_group"},
		{"pod group with a user", func(c *runtime.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{RunAsUser: &runtime.Int64Value{Value: 1000}, RunAsGroup: &runtime.Int64Value{Value: 1000}}
		}, ""},
		{"pod uid negative", func(c *runtime.PodSandboxConfig) {
			c.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{RunAsUser: &runtime.Int64Value{Value: -1}}
		}, "config.linux.security_context.run_as_user"},
		// What real pods carry must pass.
		{"multi-line annotation value", func(c *runtime.PodSandboxConfig) {
			c.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{\"kind\":\"Pod\"}\n"}
		}, ""},
		{"large annotation value", func(c *runtime.PodSandboxConfig) {
			c.Annotations = map[string]string{"big": strings.Repeat("x", 100<<10)}
		}, ""},
		{"annotations over 256 KiB", func(c *runtime.PodSandboxConfig) {
			c.Annotations = map[string]string{"a": strings.Repeat("x", 200<<10), "b": strings.Repeat("y", 100<<10)}
		}, "config.annotations"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testreq.Sandbox()
			c.modify(cfg)
			testreq.CheckValidation(t, validate.SandboxConfig(cfg, false), c.field)
		})
	}
}

func TestValidateContainerConfig(t *testing.T) {
	cases := []struct {
		name   string
		modify func(c *runtime.ContainerConfig)
		field  string
	}{
		{"valid", func(c *runtime.ContainerConfig) {}, ""},
		{"no image", func(c *runtime.ContainerConfig) { c.Image = nil }, "config.image.image"},
		{"absolute log path", func(c *runtime.ContainerConfig) { c.LogPath = "/etc/shadow" }, "config.log_path"},
		{"log path traversal", func(c *runtime.ContainerConfig) { c.LogPath = "../../etc/cron.d/x" }, "config.log_path"},
		{"relative mount", func(c *runtime.ContainerConfig) { c.Mounts[0].ContainerPath = "data" }, "config.mounts.container_path"},
		{"mount traversal", func(c *runtime.ContainerConfig) { c.Mounts[0].HostPath = "/srv/../etc" }, "config.mounts.host_path"},
		{"bad propagation", func(c *runtime.ContainerConfig) { c.Mounts[0].Propagation = 7 }, "config.mounts.propagation"},
		{"env without key", func(c *runtime.ContainerConfig) { c.Envs[0].Key = "" }, "config.envs"},
		{"negative quota", func(c *runtime.ContainerConfig) { c.Linux.Resources.CpuQuota = -7 }, "config.linux.resources.cpu_quota"},
		{"bad cpuset", func(c *runtime.ContainerConfig) { c.Linux.Resources.CpusetCpus = "all" }, "config.linux.resources.cpuset_cpus"},
		{"oom adj out of range", func(c *runtime.ContainerConfig) { c.Linux.Resources.OomScoreAdj = 5000 }, "config.linux.resources.oom_score_adj"},
		{"bad device perms", func(c *runtime.ContainerConfig) {
			c.Devices = []*runtime.Device{{HostPath: "/dev/null", ContainerPath: "/dev/n", Permissions: "rwx"}}
		}, "config.devices.permissions"},
		{"negative uid", func(c *runtime.ContainerConfig) {
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{RunAsUser: &runtime.Int64Value{Value: -1}}
		}, "config.linux.security_context.run_as_user"},
		{"localhost seccomp without ref", func(c *runtime.ContainerConfig) {
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{Seccomp: &runtime.SecurityProfile{ProfileType: runtime.SecurityProfile_Localhost}}
		}, "config.linux.security_context.seccomp.localhost_ref"},
		{"unknown stop signal", func(c *runtime.ContainerConfig) { c.StopSignal = 999 }, "config.stop_signal"},
		{"NUL in an argument", func(c *runtime.ContainerConfig) { c.Args = []string{"a\x00b"} }, "config.args"},
		{"argument over MAX_ARG_STRLEN", func(c *runtime.ContainerConfig) { c.Args = []string{strings.Repeat("a", 129<<10)} }, "config.args"},
		{"short cpu period", func(c *runtime.ContainerConfig) { c.Linux.Resources.CpuPeriod = 10 }, "config.linux.resources.cpu_period"},
		{"tiny cpu quota", func(c *runtime.ContainerConfig) { c.Linux.Resources.CpuQuota = 5 }, "config.linux.resources.cpu_quota"},
		{"unified key walking up", func(c *runtime.ContainerConfig) {
			c.Linux.Resources.Unified = map[string]string{"../../memory.max": "1"}
		}, "config.linux.resources.unified"},
		{"relative masked path", func(c *runtime.ContainerConfig) {
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{MaskedPaths: []string{"proc/kcore"}}
		}, "config.linux.security_context.masked_paths"},
		{"relative seccomp profile", func(c *runtime.ContainerConfig) {
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{Seccomp: &runtime.SecurityProfile{ProfileType: runtime.SecurityProfile_Localhost, LocalhostRef: "../../etc/shadow"}}
		}, "config.linux.security_context.seccomp.localhost_ref"},
		{"deprecated seccomp path walking up", func(c *runtime.ContainerConfig) {
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{SeccompProfilePath: "localhost/../x.json"}
		}, "config.linux.security_context.seccomp_profile_path"},
		{"uid beyond 32 bits", func(c *runtime.ContainerConfig) {
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{RunAsUser: &runtime.Int64Value{Value: 1 << 32}}
		}, "config.linux.security_context.run_as_user"},
		{"working dir with a newline", func(c *runtime.ContainerConfig) { c.WorkingDir = "/a\nb" }, "config.working_dir"},
		{"PID mode TARGET without target", func(c *runtime.ContainerConfig) {
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_TARGET}}
		}, "config.linux.security_context.namespace_options.target_id"},
		{"network mode TARGET", func(c *runtime.ContainerConfig) {
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_TARGET, TargetId: "abc"}}
		}, "config.linux.security_context.namespace_options.network"},
		{"IPC mode TARGET", func(c *runtime.ContainerConfig) {
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Ipc: runtime.NamespaceMode_TARGET, TargetId: "abc"}}
		}, "config.linux.security_context.namespace_options.ipc"},
		{"group without a user", func(c *runtime.ContainerConfig) {
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{RunAsGroup: &runtime.Int64Value{Value: 1000}}
		}, "config.linux.security_context.run_as_group"},
		{"image volume", func(c *runtime.ContainerConfig) {
			c.Mounts = []*runtime.Mount{{ContainerPath: "/models", Readonly: true, ImageSubPath: "v1/data", Image: &runtime.ImageSpec{Image: "registry.example/models:v1"}}}
		}, ""},
		{"writable image volume", func(c *runtime.ContainerConfig) {
			c.Mounts = []*runtime.Mount{{ContainerPath: "/models", Image: &runtime.ImageSpec{Image: "registry.example/models:v1"}}}
		}, "config.mounts.readonly"},
		{"image volume with a host path", func(c *runtime.ContainerConfig) {
			c.Mounts[0].Readonly = true
			c.Mounts[0].Image = &runtime.ImageSpec{Image: "busybox"}
		}, "config.mounts.host_path"},
		{"image volume with a bad reference", func(c *runtime.ContainerConfig) {
			c.Mounts = []*runtime.Mount{{ContainerPath: "/models", Readonly: true, Image: &runtime.ImageSpec{Image: "Bad Ref"}}}
		}, "config.mounts.image.image"},
		{"image sub path that walks up", func(c *runtime.ContainerConfig) {
			c.Mounts = []*runtime.Mount{{ContainerPath: "/models", Readonly: true, ImageSubPath: "a/../../etc", Image: &runtime.ImageSpec{Image: "busybox"}}}
		}, "config.mounts.image_sub_path"},
		{"absolute image sub path", func(c *runtime.ContainerConfig) {
			c.Mounts = []*runtime.Mount{{ContainerPath: "/models", Readonly: true, ImageSubPath: "/etc", Image: &runtime.ImageSpec{Image: "busybox"}}}
		}, "config.mounts.image_sub_path"},
		{"image sub path without an image", func(c *runtime.ContainerConfig) { c.Mounts[0].ImageSubPath = "etc" }, "config.mounts.image_sub_path"},
		{"group with a user", func(c *runtime.ContainerConfig) {
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{RunAsUser: &runtime.Int64Value{Value: 0}, RunAsGroup: &runtime.Int64Value{Value: 1000}}
		}, ""},
		{"group with a user name", func(c *runtime.ContainerConfig) {
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{RunAsUsername: "nobody", RunAsGroup: &runtime.Int64Value{Value: 0}}
		}, ""},
		{"empty image spec on a host path mount", func(c *runtime.ContainerConfig) { c.Mounts[0].Image = &runtime.ImageSpec{} }, ""},
		// What real pods carry must pass.
		{"multi-line script", func(c *runtime.ContainerConfig) {
			c.Command = []string{"sh", "-c"}
			c.Args = []string{"set -e\n\tfor i in 1 2; do\n\t\techo $i\n\tdone\n"}
		}, ""},
		{"multi-line env and annotation", func(c *runtime.ContainerConfig) {
			c.Envs = []*runtime.KeyValue{{Key: "CERT", Value: []byte("-----BEGIN-----\nabc\n-----END-----\n")}}
			c.Annotations = map[string]string{"note": "two\nlines"}
		}, ""},
		{"CDI device not qualified", func(c *runtime.ContainerConfig) {
			c.CDIDevices = []*runtime.CDIDevice{{Name: "gpu0"}}
		}, "config.CDI_devices"},
		{"CDI device empty", func(c *runtime.ContainerConfig) {
			c.CDIDevices = []*runtime.CDIDevice{{}}
		}, "config.CDI_devices"},
		{"CDI annotation not qualified", func(c *runtime.ContainerConfig) {
			c.Annotations = map[string]string{"cdi.k8s.io/gpu": "vendor.com/gpu=0,gpu1"}
		}, "config.annotations[cdi.k8s.io/gpu]"},
		{"CDI devices", func(c *runtime.ContainerConfig) {
			c.CDIDevices = []*runtime.CDIDevice{{Name: "vendor.com/gpu=0"}}
			c.Annotations = map[string]string{"cdi.k8s.io/gpu": "vendor.com/gpu=1,vendor.com/gpu=all"}
		}, ""},
		{"container user namespace without mappings", func(c *runtime.ContainerConfig) {
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{NamespaceOptions: &runtime.NamespaceOption{
				UsernsOptions: &runtime.UserNamespace{Mode: runtime.NamespaceMode_POD}}}
		}, "config.linux.security_context.namespace_options.userns_options.uids"},
		{"supplemental groups policy Strict", func(c *runtime.ContainerConfig) {
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{SupplementalGroupsPolicy: runtime.SupplementalGroupsPolicy_Strict}
		}, ""},
		{"ambient capabilities", func(c *runtime.ContainerConfig) {
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{Capabilities: &runtime.Capability{AddAmbientCapabilities: []string{"NET_BIND_SERVICE"}}}
		}, "config.linux.security_context.capabilities.add_ambient_capabilities"},
		{"recursive read-only mount", func(c *runtime.ContainerConfig) {
			c.Mounts[0].Readonly, c.Mounts[0].RecursiveReadOnly = true, true
		}, ""},
		{"recursive read-only mount that is writable", func(c *runtime.ContainerConfig) {
			c.Mounts[0].RecursiveReadOnly = true
		}, "config.mounts.recursive_read_only"},
		{"recursive read-only mount with host-to-container propagation", func(c *runtime.ContainerConfig) {
			c.Mounts[0].Readonly, c.Mounts[0].RecursiveReadOnly = true, true
			c.Mounts[0].Propagation = runtime.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
		}, "config.mounts.recursive_read_only"},
		{"ID-mapped mount without gid mappings", func(c *runtime.ContainerConfig) {
			c.Mounts[0].UidMappings = []*runtime.IDMapping{{HostId: 65536, Length: 65536}}
		}, "config.mounts.gidMappings"},
		{"mount options noexec, nodev, nosuid", func(c *runtime.ContainerConfig) {
			c.Mounts[0].MountOptions = []string{"noexec", "nodev", "nosuid"}
		}, ""},
		{"mount options on a read-only mount", func(c *runtime.ContainerConfig) {
			c.Mounts[0].Readonly, c.Mounts[0].MountOptions = true, []string{"nosuid"}
		}, ""},
		// None that would undo a protection or give what the node withholds.
		{"mount option rw", func(c *runtime.ContainerConfig) {
			c.Mounts[0].Readonly, c.Mounts[0].MountOptions = true, []string{"rw"}
		}, "config.mounts.mount_options"},
		{"mount option exec", func(c *runtime.ContainerConfig) { c.Mounts[0].MountOptions = []string{"exec"} }, "config.mounts.mount_options"},
		{"mount option suid", func(c *runtime.ContainerConfig) { c.Mounts[0].MountOptions = []string{"nosuid", "suid"} }, "config.mounts.mount_options"},
		{"mount option dev", func(c *runtime.ContainerConfig) { c.Mounts[0].MountOptions = []string{"dev"} }, "config.mounts.mount_options"},
		{"mount option rshared", func(c *runtime.ContainerConfig) { c.Mounts[0].MountOptions = []string{"rshared"} }, "config.mounts.mount_options"},
		{"mount option with a comma", func(c *runtime.ContainerConfig) { c.Mounts[0].MountOptions = []string{"noexec,suid"} }, "config.mounts.mount_options"},
		{"mount option empty", func(c *runtime.ContainerConfig) { c.Mounts[0].MountOptions = []string{""} }, "config.mounts.mount_options"},
		// What the kubelet sends for every ordinary container must pass.
		{"kubelet defaults: host user namespace, Merge, no relabel", func(c *runtime.ContainerConfig) {
			c.Mounts[0].Readonly = true
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{
				NamespaceOptions:         &runtime.NamespaceOption{Pid: runtime.NamespaceMode_CONTAINER, UsernsOptions: &runtime.UserNamespace{Mode: runtime.NamespaceMode_NODE}},
				SupplementalGroupsPolicy: runtime.SupplementalGroupsPolicy_Merge,
			}
		}, ""},
		{"PID mode TARGET with a target", func(c *runtime.ContainerConfig) {
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_TARGET, TargetId: "abc123"}}
		}, ""},
		{"localhost seccomp profile", func(c *runtime.ContainerConfig) {
			c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{Seccomp: &runtime.SecurityProfile{ProfileType: runtime.SecurityProfile_Localhost, LocalhostRef: "/var/lib/kubelet/seccomp/audit.json"}}
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testreq.Container()
			c.modify(cfg)
			testreq.CheckValidation(t, validate.ContainerConfig(cfg, false), c.field)
		})
	}
}

// The grammar itself is image.ValidateReference's (image/reference_test.go);
// here, that the server uses it and names the field.
func TestValidateImageRef(t *testing.T) {
	for ref, ok := range map[string]bool{
		"busybox":                            true,
		"sha256:" + strings.Repeat("0f", 32): true, // an image ID
		"":                                   false,
		"registry.local/../../x:latest":      false,
		"x/" + strings.Repeat("a", 5000):     false,
	} {
		err := validate.ImageRef("config.image.image", ref)
		if (err == nil) != ok {
			t.Errorf("validate.ImageRef(%.40q) = %v, want ok=%v", ref, err, ok)
		}
		if err != nil && (!errors.Is(err, validate.ErrInvalid) || !strings.Contains(err.Error(), "config.image.image")) {
			t.Errorf("validate.ImageRef(%.40q) = %v, want validate.ErrInvalid naming the field", ref, err)
		}
	}
}

// On a host with SELinux, labels and relabeling that minicri cannot apply
// are refused; on a host without, they are ignored, as containerd does.
func TestValidateSELinuxOnlyWhereEnabled(t *testing.T) {
	withLabel := func() *runtime.ContainerConfig {
		c := testreq.Container()
		c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{SelinuxOptions: &runtime.SELinuxOption{Type: "container_t", Level: "s0:c1,c2"}}
		return c
	}
	withRelabel := func() *runtime.ContainerConfig {
		c := testreq.Container()
		c.Mounts[0].SelinuxRelabel = true
		return c
	}
	podWithLabel := func() *runtime.PodSandboxConfig {
		c := testreq.Sandbox()
		c.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{SelinuxOptions: &runtime.SELinuxOption{Level: "s0:c1,c2"}}
		return c
	}
	for _, enabled := range []bool{false, true} {
		want := func(field string) string {
			if enabled {
				return field
			}
			return ""
		}
		t.Run(fmt.Sprintf("selinux=%v", enabled), func(t *testing.T) {
			testreq.CheckValidation(t, validate.ContainerConfig(withLabel(), enabled), want("config.linux.security_context.selinux_options"))
			testreq.CheckValidation(t, validate.ContainerConfig(withRelabel(), enabled), want("config.mounts.selinux_relabel"))
			testreq.CheckValidation(t, validate.SandboxConfig(podWithLabel(), enabled), want("config.linux.security_context.selinux_options"))
		})
	}
}

func TestValidateContainerInPod(t *testing.T) {
	nodeNet := &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE}
	nodeIPC := &runtime.NamespaceOption{Ipc: runtime.NamespaceMode_NODE}
	cases := []struct {
		name     string
		pod, ctr *runtime.NamespaceOption
		field    string
	}{
		{"both the pod's", nil, nil, ""},
		{"host network pod, container says nothing (crictl)", nodeNet, nil, ""},
		{"host network pod and container (kubelet)", nodeNet, nodeNet, ""},
		{"host network container in a pod network", nil, nodeNet, "config.linux.security_context.namespace_options.network"},
		{"host IPC container in a pod IPC", nil, nodeIPC, "config.linux.security_context.namespace_options.ipc"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := testreq.Sandbox()
			pod.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: c.pod}
			ctr := testreq.Container()
			ctr.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{NamespaceOptions: c.ctr}
			testreq.CheckValidation(t, validate.ContainerInPod(pod, ctr, kernelSupportsUserNamespaces), c.field)
		})
	}
}

// kernelSupportsUserNamespaces answers for a kernel that can run a pod in a
// user namespace; server's tests cover the kernel that cannot.
func kernelSupportsUserNamespaces() error { return nil }
