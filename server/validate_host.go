package server

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/server/podsandbox"
	"github.com/minicri/minicri/server/validate"
)

// The request rules that ask the host, its kernel or a runtime handler; the
// field rules, which ask nothing, are in server/validate.

// hostSELinux reports whether the host runs SELinux. minicri does not
// label containers: SELinux options are refused on such a host, where a
// container would run with the wrong label, and ignored on any other, as
// containerd ignores them when SELinux is off.
var hostSELinux = sync.OnceValue(func() bool {
	_, err := os.Stat("/sys/fs/selinux/enforce")
	return err == nil
})

// validatePodUserNamespace refuses what cannot go with a user namespace of
// the pod's own: the host's PID or IPC namespace (the kubelet refuses
// hostUsers: false with either too), and a handler whose OCI runtime cannot
// idmap mounts, which would leave the rootfs and every volume owned by
// nobody. Never silently the host's user namespace instead. The host's
// network is allowed (KEP-5607, Status's user_namespaces_host_network): the
// pod's user namespace does not own it, so its root can read the host's
// interfaces but not change them.
func (s *Server) validatePodUserNamespace(cfg *runtime.PodSandboxConfig, handler string) error {
	if validate.PodUserNamespace(cfg) == nil {
		return nil
	}
	const field = "config.linux.security_context.namespace_options"
	o := podsandbox.NamespaceOptions(cfg)
	for _, c := range validate.NamespaceModes(o) {
		if c.V == runtime.NamespaceMode_NODE && c.Name != "network" {
			return validate.Invalidf(field+"."+c.Name, "the host's %s namespace cannot go with a user namespace of the pod's own (userns_options mode POD)", c.Name)
		}
	}
	rt, err := s.runtimes.Get(handler)
	if err != nil {
		return validate.Invalidf("runtime_handler", "%v", err)
	}
	f, err := rt.Features()
	if err != nil || !f.IDMappedMounts {
		why := "its OCI runtime has no idmapped mounts"
		if err != nil {
			why = fmt.Sprintf("its OCI runtime reports no features: %v", err)
		}
		return validate.Invalidf(field+".userns_options", "runtime handler %q cannot run a pod in a user namespace: %s (handlers that can: %s; docs/security.md)", handler, why, canRunUserNamespaces(s.userNamespaceHandlers()))
	}
	if podsandbox.HostNetwork(cfg) && !recursiveReadOnly(f) {
		// As Status reports the feature (handlerDetails): the host's /sys
		// itself comes read-only from the monitor (oci.StageHostSys).
		return validate.Invalidf(field+".network", "runtime handler %q cannot bind the host's /sys recursively read-only (rro) for a pod in a user namespace on the host's network", handler)
	}
	return kernelUserNamespaces()
}

// canRunUserNamespaces lists the handlers for the error, or says what would
// add one.
func canRunUserNamespaces(names []string) string {
	if len(names) == 0 {
		return fmt.Sprintf("none; make deps installs %s", config.CurrentRuncHandler)
	}
	return strings.Join(names, ", ")
}

// errHandlerUnavailable: the handler is configured but its runtime binary
// is not there (runc-current before make deps built it). The node may get
// it later, so it is the node's state, not a malformed request.
var errHandlerUnavailable = errors.New("runtime handler unavailable")

// checkHandlerAvailable refuses a pod on a handler whose runtime binary is
// missing at once, with the config key to fix, rather than at its first
// container. A PATH lookup or a stat, as Status does.
func (s *Server) checkHandlerAvailable(handler string) error {
	rt, err := s.runtimes.Get(handler)
	if err != nil {
		return validate.Invalidf("runtime_handler", "%v", err)
	}
	if err := rt.Available(); err != nil {
		return fmt.Errorf("%w: %q: %v (runtime.handlers.%s.path)", errHandlerUnavailable, handler, err, handler)
	}
	return nil
}
