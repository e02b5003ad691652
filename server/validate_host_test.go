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
	"github.com/minicri/minicri/server/internal/testreq"
	"github.com/minicri/minicri/server/validate"
)

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
		{"current", &runtime.NamespaceOption{UsernsOptions: testreq.KubeletUserns()}, ""},
		{"runc", &runtime.NamespaceOption{UsernsOptions: testreq.KubeletUserns()}, field + ".userns_options"},
		{"missing", &runtime.NamespaceOption{UsernsOptions: testreq.KubeletUserns()}, field + ".userns_options"},
		{"runc", &runtime.NamespaceOption{UsernsOptions: &runtime.UserNamespace{Mode: runtime.NamespaceMode_NODE}}, ""},
		// hostNetwork with hostUsers: false (KEP-5607), but not on a
		// handler that cannot run a user namespace at all.
		{"current", &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE, UsernsOptions: testreq.KubeletUserns()}, ""},
		{"runc", &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE, UsernsOptions: testreq.KubeletUserns()}, field + ".userns_options"},
		{"no-rro", &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE, UsernsOptions: testreq.KubeletUserns()}, field + ".network"},
		{"no-rro", &runtime.NamespaceOption{UsernsOptions: testreq.KubeletUserns()}, ""},
		{"current", &runtime.NamespaceOption{Pid: runtime.NamespaceMode_NODE, UsernsOptions: testreq.KubeletUserns()}, field + ".pid"},
		{"current", &runtime.NamespaceOption{Ipc: runtime.NamespaceMode_NODE, UsernsOptions: testreq.KubeletUserns()}, field + ".ipc"},
	}
	for _, c := range cases {
		cfg := testreq.Sandbox()
		cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: c.ns}
		t.Run(c.handler+" "+c.field, func(t *testing.T) {
			testreq.CheckValidation(t, s.validatePodUserNamespace(cfg, c.handler), c.field)
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
			pod := testreq.Sandbox()
			pod.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{UsernsOptions: testreq.KubeletUserns()}}
			ctr := &runtime.ContainerConfig{Linux: &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
				NamespaceOptions: &runtime.NamespaceOption{UsernsOptions: testreq.KubeletUserns()}}}}
			for what, err := range map[string]error{
				"RunPodSandbox":   s.validatePodUserNamespace(pod, "current"),
				"CreateContainer": validate.ContainerInPod(pod, ctr, kernelUserNamespaces),
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
