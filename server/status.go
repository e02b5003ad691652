package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/minicri/minicri/internal/kernelfeat"
	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/oci"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runtimeProbe is what Status, and the checks of a pod's handler, ask of a
// runtime (*oci.Runtime): is its binary there, and what can it do.
type runtimeProbe interface {
	Available() error
	Features() (oci.Features, error)
}

// networkConfig is the node's CNI configuration (*network.CNI): whether
// one loads, for Status, and writing it from the template when
// UpdateRuntimeConfig brings the pod CIDR.
type networkConfig interface {
	Ready() error
	WriteConfFromTemplate(tmplPath string, values network.TemplateValues) (written bool, err error)
}

// Status reports whether the runtime and the pod network are ready. The
// kubelet marks the node NotReady while either condition is false, so each
// false condition carries a reason an operator can act on.
func (s *Server) Status(ctx context.Context, req *runtime.StatusRequest) (*runtime.StatusResponse, error) {
	runtimeReady := &runtime.RuntimeCondition{Type: runtime.RuntimeReady, Status: true}
	if reason, err := s.runtimeReady(); err != nil {
		runtimeReady.Status = false
		runtimeReady.Reason = reason
		runtimeReady.Message = err.Error()
	}
	networkReady := &runtime.RuntimeCondition{Type: runtime.NetworkReady, Status: true}
	if err := s.networkReady(); err != nil {
		networkReady.Status = false
		networkReady.Reason = "NetworkPluginNotReady"
		networkReady.Message = err.Error()
	}
	resp := &runtime.StatusResponse{
		Status:          &runtime.RuntimeStatus{Conditions: []*runtime.RuntimeCondition{runtimeReady, networkReady, s.runcFixesCondition()}},
		RuntimeHandlers: s.runtimeHandlers(),
		Features:        s.runtimeFeatures(),
	}
	if req.GetVerbose() {
		info, err := s.statusInfo()
		if err != nil {
			return nil, toStatus(err)
		}
		resp.Info = info
	}
	return resp, nil
}

// runtimeReady says why no container could be made now, and a reason for
// the condition, or nil: the default handler's runtime binary or the
// monitor binary is missing. The kubelet calls Status every few seconds, so
// this is a PATH lookup and a stat, not a run of the binaries.
func (s *Server) runtimeReady() (reason string, err error) {
	rt, err := s.runtimes.Get("")
	if err != nil {
		return "RuntimeHandlerNotConfigured", err
	}
	if err := rt.Available(); err != nil {
		return "RuntimeBinaryNotFound", fmt.Errorf("default runtime handler %q: %w (runtime.handlers.%s.path)", s.cfg.Runtime.DefaultHandler, err, s.cfg.Runtime.DefaultHandler)
	}
	if _, err := os.Stat(s.monitorPath); err != nil {
		return "MonitorBinaryNotFound", fmt.Errorf("monitor binary: %w (runtime.monitor_path)", err)
	}
	return "", nil
}

// RuncHasSecurityFixes is a condition of Status beside the two the kubelet
// requires: false while the default handler's runc lacks known fixes of
// container escapes. The kubelet reads only RuntimeReady and NetworkReady,
// so the node keeps running pods (a node with no other runc can run none
// otherwise), while crictl info shows the condition first thing; containerd
// reports its deprecations the same way.
const RuncHasSecurityFixes = "RuncHasSecurityFixes"

// runcFixesCondition is RuncHasSecurityFixes for the default handler. A
// handler that is not the default runs only pods that name it, and is
// named in the info (runtimeHandlerInfo) and the start-up log.
func (s *Server) runcFixesCondition() *runtime.RuntimeCondition {
	c := &runtime.RuntimeCondition{Type: RuncHasSecurityFixes, Status: true}
	rt, err := s.runtimes.Get("")
	if err != nil {
		return c
	}
	f, _ := rt.Features()
	missing := f.MissingFixes()
	if len(missing) == 0 {
		return c
	}
	bin, _ := rt.Binary()
	c.Status = false
	c.Reason = "RuncLacksSecurityFixes"
	c.Message = fmt.Sprintf("default runtime handler %q runs runc %s (%s), which lacks the fixes of %s, container escapes (fixed in %s): install a current runc (docs/operations.md)",
		s.cfg.Runtime.DefaultHandler, f.RuncVersion, bin, strings.Join(missing, ", "), oci.RuncFixedIn)
	return c
}

// networkReady says why pods cannot get a network, or nil.
func (s *Server) networkReady() error {
	return s.cniConf.Ready()
}

// userNamespacesSupported: minicri itself can run a pod in its own user
// namespace (given a runtime with idmapped mounts, container_userns.go).
const userNamespacesSupported = true

// runtimeHandlers lists each handler ("" is the default one) with the
// features its OCI runtime has, as the kubelet reads them to decide whether
// a pod may ask for recursive read-only mounts or a user namespace. A
// configured handler whose runtime is not installed (the default config
// names crun) is left out: listed, it would read as a handler without
// features. It shows up at the first Status after it is installed. The
// default handler stays listed (as "" too): RuntimeReady says it is missing.
func (s *Server) runtimeHandlers() []*runtime.RuntimeHandler {
	names := make([]string, 0, len(s.cfg.Runtime.Handlers))
	for name := range s.cfg.Runtime.Handlers {
		if rt, err := s.runtimes.Get(name); name == s.cfg.Runtime.DefaultHandler || err == nil && rt.Available() == nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	handlers := []*runtime.RuntimeHandler{{Name: "", Features: s.handlerFeatures("")}}
	for _, name := range names {
		handlers = append(handlers, &runtime.RuntimeHandler{Name: name, Features: s.handlerFeatures(name)})
	}
	return handlers
}

// allHandlerDetails are the details of the handlers Status lists.
func (s *Server) allHandlerDetails() map[string]handlerDetails {
	out := map[string]handlerDetails{}
	for _, h := range s.runtimeHandlers() {
		out[h.GetName()] = s.handlerDetails(h.GetName())
	}
	return out
}

// handlerFeatures reports a feature only when the handler's runtime has it;
// a runtime that cannot say has none. Each runtime ran `features` once (the
// candidates for the default at start, the others at first use). User
// namespaces need the kernel too (kernelUserNamespaces): the kubelet sends
// hostUsers: false pods only where Status says they can run.
func (s *Server) handlerFeatures(handler string) *runtime.RuntimeHandlerFeatures {
	rt, err := s.runtimes.Get(handler)
	if err != nil {
		return &runtime.RuntimeHandlerFeatures{}
	}
	f, _ := rt.Features()
	return &runtime.RuntimeHandlerFeatures{
		RecursiveReadOnlyMounts: recursiveReadOnly(f),
		UserNamespaces:          f.IDMappedMounts && userNamespacesSupported && kernelUserNamespaces() == nil,
	}
}

// recursiveReadOnly: the handler's runtime can make a mount recursively
// read-only ("rro") and the kernel too (kernelfeat.RecursiveReadOnly): runc
// lists rro whatever the kernel, and before 5.12 the container would fail
// at create.
func recursiveReadOnly(f oci.Features) bool {
	return f.RecursiveReadOnly && kernelfeat.RecursiveReadOnly.Supported()
}

// runtimeFeatures is what the kubelet may ask of minicri as a whole; it
// declares each as a node feature, which the scheduler matches pods to.
// The CRI has no per-handler form of these, so one is claimed when the
// default handler (that of pods without a RuntimeClass) has it; a pod on a
// handler without it is refused at create, naming the handler, and the
// verbose Status lists each handler's (runtimeHandlerFeatures).
func (s *Server) runtimeFeatures() *runtime.RuntimeFeatures {
	def := s.handlerDetails("")
	return &runtime.RuntimeFeatures{
		// Strict (only the pod's groups) is minicri's own, whatever the
		// OCI runtime: oci.ResolveUserStrict.
		SupplementalGroupsPolicy:  true,
		UserNamespacesHostNetwork: def.UserNamespacesHostNetwork,
		MountOptions:              len(def.MountOptions) > 0,
	}
}

// handlerDetails is what one handler can do, as the verbose Status shows
// it: the CRI's per-handler features and those the CRI reports only for
// the runtime as a whole.
type handlerDetails struct {
	RecursiveReadOnlyMounts bool `json:"recursiveReadOnlyMounts"`
	UserNamespaces          bool `json:"userNamespaces"`
	// UserNamespacesHostNetwork: a pod in a user namespace of its own on
	// the host's network (KEP-5607): a handler that can run a user
	// namespace and lists rro, as validatePodUserNamespace asks.
	UserNamespacesHostNetwork bool `json:"userNamespacesHostNetwork"`
	// MountOptions are the bind mount options (KEP-5855) the handler's
	// runtime applies; none when it does not list them all.
	MountOptions []string `json:"mountOptions"`
}

func (s *Server) handlerDetails(handler string) handlerDetails {
	f := s.handlerFeatures(handler)
	d := handlerDetails{
		RecursiveReadOnlyMounts:   f.GetRecursiveReadOnlyMounts(),
		UserNamespaces:            f.GetUserNamespaces(),
		UserNamespacesHostNetwork: f.GetUserNamespaces() && f.GetRecursiveReadOnlyMounts(),
		MountOptions:              []string{},
	}
	if rt, err := s.runtimes.Get(handler); err == nil {
		if of, _ := rt.Features(); of.BindOptions {
			d.MountOptions = slices.Clone(oci.BindOptions)
		}
	}
	return d
}

// userNamespaceHandlers names the handlers that can run a pod in a user
// namespace, for the error that refuses one on another handler.
func (s *Server) userNamespaceHandlers() []string {
	var out []string
	for _, name := range s.runtimes.Names() {
		if s.handlerFeatures(name).GetUserNamespaces() {
			out = append(out, name)
		}
	}
	return out
}

// handlerInfo is what crictl info shows of each handler beyond the CRI's
// features: its runc's version and the security fixes that version lacks
// (oci.MissingRuncFixes), so that an operator sees a handler that must
// not run untrusted pods.
type handlerInfo struct {
	RuncVersion  string   `json:"runcVersion,omitempty"`
	MissingFixes []string `json:"missingSecurityFixes,omitempty"`
	FixedIn      string   `json:"fixedIn,omitempty"`
}

func (s *Server) handlerInfo() map[string]handlerInfo {
	out := map[string]handlerInfo{}
	for _, name := range s.runtimes.Names() {
		rt, err := s.runtimes.Get(name)
		if err != nil {
			continue
		}
		f, _ := rt.Features()
		info := handlerInfo{RuncVersion: f.RuncVersion, MissingFixes: f.MissingFixes()}
		if len(info.MissingFixes) > 0 {
			info.FixedIn = oci.RuncFixedIn
		}
		out[name] = info
	}
	return out
}

// statusInfo is the verbose part of Status: JSON values, as crictl info shows
// them. Besides the config, like containerd: lastCNILoadStatus ("OK" or why
// the network config does not load), and podCIDR, the node's pod CIDR as
// UpdateRuntimeConfig last gave it (containerd shows it only inside the
// config it writes from its template); checkpoint, whether
// CheckpointContainer can work here (checkpointSupport); and cgroupDriver,
// how the driver in force was chosen.
func (s *Server) statusInfo() (map[string]string, error) {
	cniStatus := "OK"
	if err := s.networkReady(); err != nil {
		cniStatus = err.Error()
	}
	info := map[string]any{
		"config":            s.configInForce(),
		"lastCNILoadStatus": cniStatus,
		"podCIDR":           s.netConfig.PodCIDR(),
		// Per handler ("" is the default), what the CRI's RuntimeFeatures
		// can only say for the runtime as a whole.
		"runtimeHandlerFeatures": s.allHandlerDetails(),
		// The handler of pods without a RuntimeClass, as chosen at start
		// when runtime.default_handler is empty.
		"defaultRuntimeHandler": s.cfg.Runtime.DefaultHandler,
		"runtimeHandlerInfo":    s.handlerInfo(),
		// What this kernel did when each feature was tried
		// (internal/kernelfeat): "yes", or "no: why".
		"kernelFeatures": kernelfeat.Report(),
		"checkpoint":     s.checkpointSupport(),
		// The driver in force, "detected" (cgroup_driver unset) or
		// "configured", and why; config shows only the driver.
		"cgroupDriver": s.cgroupDriver,
	}
	out := make(map[string]string, len(info))
	for k, v := range info {
		data, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", k, err)
		}
		out[k] = string(data)
	}
	return out, nil
}

// checkpointInfo is Status's verbose "checkpoint": whether CRIU works here,
// which one, and if not, why (what CheckpointContainer answers then).
type checkpointInfo struct {
	Available   bool   `json:"available"`
	CRIU        string `json:"criu,omitempty"`
	CRIUVersion string `json:"criuVersion,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

// checkpointSupport probes CRIU the first time (a dump of a process of its
// own) and then while its binary is the same file, answers what it found.
func (s *Server) checkpointSupport() checkpointInfo {
	st := s.checkCRIU()
	info := checkpointInfo{Available: st.Err == nil, CRIU: st.Path, CRIUVersion: st.VersionString()}
	if st.Err != nil {
		info.Reason = st.Err.Error()
	}
	return info
}
