package validate_test

import (
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/testreq"
	"github.com/minicri/minicri/server/validate"
)

func TestValidateUserNamespace(t *testing.T) {
	const field = "config.linux.security_context.namespace_options.userns_options"
	cases := []struct {
		name   string
		modify func(u *runtime.UserNamespace)
		field  string
	}{
		{"the kubelet's", func(u *runtime.UserNamespace) {}, ""},
		{"two ranges", func(u *runtime.UserNamespace) {
			u.Uids = testreq.IDMaps([3]uint32{0, 65536, 1000}, [3]uint32{1000, 200000, 1000})
		}, ""},
		{"no uid mappings", func(u *runtime.UserNamespace) { u.Uids = nil }, field + ".uids"},
		{"empty range", func(u *runtime.UserNamespace) { u.Gids = testreq.IDMaps([3]uint32{0, 65536, 0}) }, field + ".gids"},
		{"host root mapped", func(u *runtime.UserNamespace) { u.Uids = testreq.IDMaps([3]uint32{0, 0, 65536}) }, field + ".uids"},
		{"overlapping host ranges", func(u *runtime.UserNamespace) {
			u.Uids = testreq.IDMaps([3]uint32{0, 65536, 1000}, [3]uint32{1000, 66000, 1000})
		}, field + ".uids"},
		{"overlapping container ranges", func(u *runtime.UserNamespace) {
			u.Uids = testreq.IDMaps([3]uint32{0, 65536, 1000}, [3]uint32{500, 200000, 1000})
		}, field + ".uids"},
		{"past the last ID", func(u *runtime.UserNamespace) { u.Uids = testreq.IDMaps([3]uint32{0, 0xffffff00, 65536}) }, field + ".uids"},
		{"mode TARGET", func(u *runtime.UserNamespace) { u.Mode = runtime.NamespaceMode_TARGET }, field + ".mode"},
		{"mode CONTAINER", func(u *runtime.UserNamespace) { u.Mode = runtime.NamespaceMode_CONTAINER }, field + ".mode"},
		{"mode NODE with mappings", func(u *runtime.UserNamespace) { u.Mode = runtime.NamespaceMode_NODE }, field + ".uids"},
		{"mode NODE", func(u *runtime.UserNamespace) { u.Mode, u.Uids, u.Gids = runtime.NamespaceMode_NODE, nil, nil }, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testreq.Sandbox()
			u := testreq.KubeletUserns()
			c.modify(u)
			cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{UsernsOptions: u}}
			testreq.CheckValidation(t, validate.SandboxConfig(cfg, false), c.field)
		})
	}
}

func TestValidateContainerUserNamespace(t *testing.T) {
	const field = "config.linux.security_context.namespace_options.userns_options"
	other := &runtime.UserNamespace{Mode: runtime.NamespaceMode_POD, Uids: testreq.IDMaps([3]uint32{0, 131072, 65536}), Gids: testreq.IDMaps([3]uint32{0, 131072, 65536})}
	node := &runtime.UserNamespace{Mode: runtime.NamespaceMode_NODE}
	cases := []struct {
		name     string
		pod, ctr *runtime.UserNamespace
		mount    *runtime.UserNamespace // the mappings on the container's mount
		field    string
	}{
		{"the kubelet's, hostUsers: false", testreq.KubeletUserns(), testreq.KubeletUserns(), testreq.KubeletUserns(), ""},
		{"the kubelet's, hostUsers: true", node, node, nil, ""},
		{"crictl in a pod with one", testreq.KubeletUserns(), nil, nil, ""},
		{"POD in a pod without", nil, testreq.KubeletUserns(), nil, field + ".mode"},
		{"NODE in a pod with one", testreq.KubeletUserns(), node, nil, field + ".mode"},
		{"other mappings than the pod's", testreq.KubeletUserns(), other, nil, field},
		{"mount mappings without a pod user namespace", nil, nil, testreq.KubeletUserns(), "config.mounts.uidMappings"},
		{"mount mappings other than the pod's", testreq.KubeletUserns(), testreq.KubeletUserns(), other, "config.mounts.uidMappings"},
		{"mount mappings and mount option suid", testreq.KubeletUserns(), testreq.KubeletUserns(), testreq.KubeletUserns(), "config.mounts.mount_options"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := testreq.Sandbox()
			pod.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{UsernsOptions: c.pod}}
			ctr := testreq.Container()
			ctr.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{NamespaceOptions: &runtime.NamespaceOption{UsernsOptions: c.ctr}}
			if c.mount != nil {
				ctr.Mounts[0].UidMappings, ctr.Mounts[0].GidMappings = c.mount.Uids, c.mount.Gids
			}
			if c.field == "config.mounts.mount_options" {
				ctr.Mounts[0].MountOptions = []string{"suid"}
			}
			err := validate.ContainerConfig(ctr, false)
			if err == nil {
				err = validate.ContainerInPod(pod, ctr, kernelSupportsUserNamespaces)
			}
			testreq.CheckValidation(t, err, c.field)
		})
	}
}
