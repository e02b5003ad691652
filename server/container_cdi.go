package server

import (
	"sort"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// cdiRequest is one CDI device a container asks for and the request field
// that names it, for the error that refuses it.
type cdiRequest struct {
	device string
	field  string
}

// cdiRequests lists the CDI devices a container asks for: those of
// CDI_devices (DRA and device plugins), then those of the cdi.k8s.io/*
// annotations (device plugins before CDI_devices existed), without
// duplicates, as containerd's WithCDI does.
func cdiRequests(cfg *runtime.ContainerConfig) []cdiRequest {
	var out []cdiRequest
	seen := map[string]bool{}
	add := func(device, field string) {
		if !seen[device] {
			seen[device] = true
			out = append(out, cdiRequest{device, field})
		}
	}
	for _, d := range cfg.GetCDIDevices() {
		add(d.GetName(), "config.CDI_devices")
	}
	keys := make([]string, 0, len(cfg.GetAnnotations()))
	for k := range cfg.GetAnnotations() {
		if strings.HasPrefix(k, cdi.AnnotationPrefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, d := range strings.Split(cfg.GetAnnotations()[k], ",") {
			add(d, "config.annotations["+k+"]")
		}
	}
	return out
}

// resolveCDIDevices checks that every CDI device the container asks for is
// defined by a spec file now, reading them again, and returns the names to
// inject. An unknown device refuses the container: started without it, a
// GPU pod would run on the CPU, or fail later for a reason nobody sees.
func (s *Server) resolveCDIDevices(cfg *runtime.ContainerConfig) ([]string, error) {
	reqs := cdiRequests(cfg)
	if len(reqs) == 0 {
		return nil, nil
	}
	if !s.cfg.CDI.Enabled {
		return nil, invalidf(reqs[0].field, "asks for CDI device %q, but CDI is disabled on this node (cdi.enabled = false)", reqs[0].device)
	}
	devices := make([]string, len(reqs))
	for i, r := range reqs {
		devices[i] = r.device
	}
	unresolved, specErrs := s.cdi.Resolve(devices)
	if specErrs != nil {
		// As containerd: a broken spec file is the node's problem, logged;
		// it fails only the containers that ask for its devices.
		s.log.WithError(specErrs).Warn("some CDI spec files could not be used")
	}
	if len(unresolved) == 0 {
		return devices, nil
	}
	for _, r := range reqs {
		if r.device == unresolved[0] {
			why := ""
			if specErrs != nil {
				why = "; spec errors: " + specErrs.Error()
			}
			return nil, invalidf(r.field, "unknown CDI device %q: no spec file in %s defines it%s", r.device, strings.Join(s.cdi.Dirs(), ", "), why)
		}
	}
	return nil, invalidf("config.CDI_devices", "unknown CDI devices %s", strings.Join(unresolved, ", "))
}
