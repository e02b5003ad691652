package validate

import (
	"sort"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// CDIRequest is one CDI device a container asks for and the request field
// that names it, for the error that refuses it.
type CDIRequest struct {
	Device string
	Field  string
}

// CDIRequests lists the CDI devices a container asks for: those of
// CDI_devices (DRA and device plugins), then those of the cdi.k8s.io/*
// annotations (device plugins before CDI_devices existed), without
// duplicates, as containerd's WithCDI does.
func CDIRequests(cfg *runtime.ContainerConfig) []CDIRequest {
	var out []CDIRequest
	seen := map[string]bool{}
	add := func(device, field string) {
		if !seen[device] {
			seen[device] = true
			out = append(out, CDIRequest{device, field})
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
