package server

import (
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/validate"
)

// resolveCDIDevices checks that every CDI device the container asks for is
// defined by a spec file now, reading them again, and returns the names to
// inject. An unknown device refuses the container: started without it, a
// GPU pod would run on the CPU, or fail later for a reason nobody sees.
func (s *Server) resolveCDIDevices(cfg *runtime.ContainerConfig) ([]string, error) {
	reqs := validate.CDIRequests(cfg)
	if len(reqs) == 0 {
		return nil, nil
	}
	if !s.cfg.CDI.Enabled {
		return nil, validate.Invalidf(reqs[0].Field, "asks for CDI device %q, but CDI is disabled on this node (cdi.enabled = false)", reqs[0].Device)
	}
	devices := make([]string, len(reqs))
	for i, r := range reqs {
		devices[i] = r.Device
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
		if r.Device == unresolved[0] {
			why := ""
			if specErrs != nil {
				why = "; spec errors: " + specErrs.Error()
			}
			return nil, validate.Invalidf(r.Field, "unknown CDI device %q: no spec file in %s defines it%s", r.Device, strings.Join(s.cdi.Dirs(), ", "), why)
		}
	}
	return nil, validate.Invalidf("config.CDI_devices", "unknown CDI devices %s", strings.Join(unresolved, ", "))
}
