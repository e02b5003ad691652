package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/internal/kernelfeat"
)

func idMaps(m ...[3]uint32) []*runtime.IDMapping {
	out := make([]*runtime.IDMapping, 0, len(m))
	for _, r := range m {
		out = append(out, &runtime.IDMapping{ContainerId: r[0], HostId: r[1], Length: r[2]})
	}
	return out
}

// kubeletUserns is what the kubelet sends for hostUsers: false.
func kubeletUserns() *runtime.UserNamespace {
	return &runtime.UserNamespace{Mode: runtime.NamespaceMode_POD, Uids: idMaps([3]uint32{0, 65536, 65536}), Gids: idMaps([3]uint32{0, 65536, 65536})}
}

func TestValidateUserNamespace(t *testing.T) {
	const field = "config.linux.security_context.namespace_options.userns_options"
	cases := []struct {
		name   string
		modify func(u *runtime.UserNamespace)
		field  string
	}{
		{"the kubelet's", func(u *runtime.UserNamespace) {}, ""},
		{"two ranges", func(u *runtime.UserNamespace) {
			u.Uids = idMaps([3]uint32{0, 65536, 1000}, [3]uint32{1000, 200000, 1000})
		}, ""},
		{"no uid mappings", func(u *runtime.UserNamespace) { u.Uids = nil }, field + ".uids"},
		{"empty range", func(u *runtime.UserNamespace) { u.Gids = idMaps([3]uint32{0, 65536, 0}) }, field + ".gids"},
		{"host root mapped", func(u *runtime.UserNamespace) { u.Uids = idMaps([3]uint32{0, 0, 65536}) }, field + ".uids"},
		{"overlapping host ranges", func(u *runtime.UserNamespace) {
			u.Uids = idMaps([3]uint32{0, 65536, 1000}, [3]uint32{1000, 66000, 1000})
		}, field + ".uids"},
		{"overlapping container ranges", func(u *runtime.UserNamespace) {
			u.Uids = idMaps([3]uint32{0, 65536, 1000}, [3]uint32{500, 200000, 1000})
		}, field + ".uids"},
		{"past the last ID", func(u *runtime.UserNamespace) { u.Uids = idMaps([3]uint32{0, 0xffffff00, 65536}) }, field + ".uids"},
		{"mode TARGET", func(u *runtime.UserNamespace) { u.Mode = runtime.NamespaceMode_TARGET }, field + ".mode"},
		{"mode CONTAINER", func(u *runtime.UserNamespace) { u.Mode = runtime.NamespaceMode_CONTAINER }, field + ".mode"},
		{"mode NODE with mappings", func(u *runtime.UserNamespace) { u.Mode = runtime.NamespaceMode_NODE }, field + ".uids"},
		{"mode NODE", func(u *runtime.UserNamespace) { u.Mode, u.Uids, u.Gids = runtime.NamespaceMode_NODE, nil, nil }, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := goodSandboxConfig()
			u := kubeletUserns()
			c.modify(u)
			cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{UsernsOptions: u}}
			checkValidation(t, validateSandboxConfig(cfg, false), c.field)
		})
	}
}

func TestValidateContainerUserNamespace(t *testing.T) {
	const field = "config.linux.security_context.namespace_options.userns_options"
	other := &runtime.UserNamespace{Mode: runtime.NamespaceMode_POD, Uids: idMaps([3]uint32{0, 131072, 65536}), Gids: idMaps([3]uint32{0, 131072, 65536})}
	node := &runtime.UserNamespace{Mode: runtime.NamespaceMode_NODE}
	cases := []struct {
		name     string
		pod, ctr *runtime.UserNamespace
		mount    *runtime.UserNamespace // the mappings on the container's mount
		field    string
	}{
		{"the kubelet's, hostUsers: false", kubeletUserns(), kubeletUserns(), kubeletUserns(), ""},
		{"the kubelet's, hostUsers: true", node, node, nil, ""},
		{"crictl in a pod with one", kubeletUserns(), nil, nil, ""},
		{"POD in a pod without", nil, kubeletUserns(), nil, field + ".mode"},
		{"NODE in a pod with one", kubeletUserns(), node, nil, field + ".mode"},
		{"other mappings than the pod's", kubeletUserns(), other, nil, field},
		{"mount mappings without a pod user namespace", nil, nil, kubeletUserns(), "config.mounts.uidMappings"},
		{"mount mappings other than the pod's", kubeletUserns(), kubeletUserns(), other, "config.mounts.uidMappings"},
		{"mount mappings and mount option suid", kubeletUserns(), kubeletUserns(), kubeletUserns(), "config.mounts.mount_options"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := goodSandboxConfig()
			pod.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{UsernsOptions: c.pod}}
			ctr := goodContainerConfig()
			ctr.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{NamespaceOptions: &runtime.NamespaceOption{UsernsOptions: c.ctr}}
			if c.mount != nil {
				ctr.Mounts[0].UidMappings, ctr.Mounts[0].GidMappings = c.mount.Uids, c.mount.Gids
			}
			if c.field == "config.mounts.mount_options" {
				ctr.Mounts[0].MountOptions = []string{"suid"}
			}
			err := validateContainerConfig(ctr, false)
			if err == nil {
				err = validateContainerInPod(pod, ctr)
			}
			checkValidation(t, err, c.field)
		})
	}
}

// A user namespace is refused on a handler whose runtime cannot idmap
// mounts, or which runs without a PID or IPC namespace of its own;
// it is never run in the host's user namespace instead.
func TestValidatePodUserNamespaceNeedsIDMappedMounts(t *testing.T) {
	dir := t.TempDir()
	fake := func(name, features string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho '"+features+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	s := newRecordsServer(t)
	s.cfg = config.Default()
	s.cfg.Runtime.Handlers = map[string]config.RuntimeHandler{
		"runc":    {Path: fake("old", `{"mountOptions": ["rbind"]}`)},
		"current": {Path: fake("new", `{"mountOptions": ["rro"], "linux": {"mountExtensions": {"idmap": {"enabled": true}}}}`)},
		"no-rro":  {Path: fake("no-rro", `{"linux": {"mountExtensions": {"idmap": {"enabled": true}}}}`)},
		"missing": {Path: filepath.Join(dir, "missing")},
	}
	s.runtimes = ociHandlers{runtimeHandlers(s.cfg, "")}
	const field = "config.linux.security_context.namespace_options"
	cases := []struct {
		handler string
		ns      *runtime.NamespaceOption
		field   string
	}{
		{"current", &runtime.NamespaceOption{UsernsOptions: kubeletUserns()}, ""},
		{"runc", &runtime.NamespaceOption{UsernsOptions: kubeletUserns()}, field + ".userns_options"},
		{"missing", &runtime.NamespaceOption{UsernsOptions: kubeletUserns()}, field + ".userns_options"},
		{"runc", &runtime.NamespaceOption{UsernsOptions: &runtime.UserNamespace{Mode: runtime.NamespaceMode_NODE}}, ""},
		// hostNetwork with hostUsers: false (KEP-5607), but not on a
		// handler that cannot run a user namespace at all.
		{"current", &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE, UsernsOptions: kubeletUserns()}, ""},
		{"runc", &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE, UsernsOptions: kubeletUserns()}, field + ".userns_options"},
		{"no-rro", &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE, UsernsOptions: kubeletUserns()}, field + ".network"},
		{"no-rro", &runtime.NamespaceOption{UsernsOptions: kubeletUserns()}, ""},
		{"current", &runtime.NamespaceOption{Pid: runtime.NamespaceMode_NODE, UsernsOptions: kubeletUserns()}, field + ".pid"},
		{"current", &runtime.NamespaceOption{Ipc: runtime.NamespaceMode_NODE, UsernsOptions: kubeletUserns()}, field + ".ipc"},
	}
	for _, c := range cases {
		cfg := goodSandboxConfig()
		cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: c.ns}
		t.Run(c.handler+" "+c.field, func(t *testing.T) {
			checkValidation(t, s.validatePodUserNamespace(cfg, c.handler), c.field)
		})
	}
}

// On a kernel that cannot idmap a tmpfs (before 6.3: Debian 12's 6.1),
// Status does not offer user namespaces even with a runtime that has
// idmapped mounts, and a hostUsers: false pod, or a container of one, is
// refused at once with FailedPrecondition naming the kernel, not left to
// fail in runc ('MOUNT_ATTR_IDMAP … invalid argument' in the guest).
func TestUserNamespacesNeedTheKernel(t *testing.T) {
	dir := t.TempDir()
	runtimePath := filepath.Join(dir, "runc")
	if err := os.WriteFile(runtimePath, []byte(`#!/bin/sh
echo '{"linux": {"mountExtensions": {"idmap": {"enabled": true}}}}'
`), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		kernel string
		tmpfs  bool
		want   codes.Code
	}{
		{"6.3 and later (this host)", true, codes.OK},
		{"before 6.3 (Debian 12's 6.1)", false, codes.FailedPrecondition},
	} {
		t.Run(c.kernel, func(t *testing.T) {
			defer kernelfeat.IDMappedTmpfs.Force(c.tmpfs, "tmpfs: idmapped mount (MOUNT_ATTR_IDMAP): invalid argument")()
			defer kernelfeat.IDMappedOverlay.Force(true, "")()
			s := newRecordsServer(t)
			s.cfg = config.Default()
			s.cfg.Runtime.Handlers = map[string]config.RuntimeHandler{"current": {Path: runtimePath}}
			s.runtimes = ociHandlers{runtimeHandlers(s.cfg, "")}
			if got := s.handlerFeatures("current").GetUserNamespaces(); got != c.tmpfs {
				t.Errorf("Status: user namespaces = %v, want %v", got, c.tmpfs)
			}
			pod := goodSandboxConfig()
			pod.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{UsernsOptions: kubeletUserns()}}
			ctr := &runtime.ContainerConfig{Linux: &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
				NamespaceOptions: &runtime.NamespaceOption{UsernsOptions: kubeletUserns()}}}}
			for what, err := range map[string]error{
				"RunPodSandbox":   s.validatePodUserNamespace(pod, "current"),
				"CreateContainer": validateContainerInPod(pod, ctr),
			} {
				if got := status.Code(toStatus(err)); got != c.want {
					t.Errorf("%s: %v (code %v), want %v", what, err, got, c.want)
				}
				if err != nil && !strings.Contains(err.Error(), "Linux 6.3") {
					t.Errorf("%s: error %q does not say what the kernel lacks", what, err)
				}
			}
		})
	}
}
