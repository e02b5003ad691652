package server

import (
	"cmp"
	"context"
	"slices"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/server/podsandbox"
)

// PodSandboxStatus reports a sandbox's state, IPs and namespace modes, and
// the statuses of the pod's containers.
//
// It sets no timestamp, on purpose. A kubelet with EventedPLEG on (v1.37
// included) takes a response with a timestamp to be complete: it then uses
// containers_statuses instead of asking ContainerStatus for each container,
// but leaves the pod's active containers (those of its current sandbox)
// empty, so it never sees an init container done and runs the first one
// again and again. Without a timestamp it asks ContainerStatus, as with the
// gate off.
func (s *Server) PodSandboxStatus(ctx context.Context, req *runtime.PodSandboxStatusRequest) (*runtime.PodSandboxStatusResponse, error) {
	rec, err := s.lookupSandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, toStatus(err)
	}
	containers := s.podContainerStatuses(rec)
	cfg, err := rec.DecodeConfig()
	if err != nil {
		return nil, toStatus(err)
	}
	return &runtime.PodSandboxStatusResponse{
		Status:             sandboxStatus(rec, cfg),
		ContainersStatuses: containers,
		Info:               verboseInfo(req.GetVerbose(), rec, cfg),
	}, nil
}

// podContainerStatuses are the statuses of the containers of a sandbox's
// pod, in every sandbox the pod has had, newest first: what the kubelet
// otherwise gathers from ListContainers by pod UID and ContainerStatus, and
// sorts so. The exited ones count: the kubelet takes a restart count from
// the last one of a name. Containers still being created have no status yet.
func (s *Server) podContainerStatuses(sb lifecycle.SandboxRecord) []*runtime.ContainerStatus {
	ofPod := map[string]bool{sb.ID: true}
	if uid := sb.Metadata.UID; uid != "" {
		for _, other := range s.sandboxes.List() {
			if other.Metadata.UID == uid {
				ofPod[other.ID] = true
			}
		}
	}
	var recs []lifecycle.ContainerRecord
	for _, c := range s.containers.List() {
		if ofPod[c.SandboxID] && c.State != lifecycle.StateCreating {
			recs = append(recs, c)
		}
	}
	slices.SortFunc(recs, func(a, b lifecycle.ContainerRecord) int {
		return cmp.Or(cmp.Compare(b.CreatedAt, a.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	out := make([]*runtime.ContainerStatus, 0, len(recs))
	for _, c := range recs {
		cfg, err := c.DecodeConfig()
		if err != nil {
			continue
		}
		out = append(out, containerStatus(c, cfg))
	}
	return out
}

func sandboxStatus(rec lifecycle.SandboxRecord, cfg *runtime.PodSandboxConfig) *runtime.PodSandboxStatus {
	st := &runtime.PodSandboxStatus{
		Id:             rec.ID,
		Metadata:       cfg.GetMetadata(),
		State:          sandboxState(rec),
		CreatedAt:      rec.CreatedAt,
		Labels:         rec.Labels,
		Annotations:    rec.Annotations,
		RuntimeHandler: rec.Handler,
		Network:        &runtime.PodSandboxNetworkStatus{},
		Linux: &runtime.LinuxPodSandboxStatus{
			Namespaces: &runtime.Namespace{Options: effectiveNamespaceOptions(cfg)},
		},
	}
	if len(rec.IPs) > 0 {
		st.Network.Ip = rec.IPs[0]
		for _, ip := range rec.IPs[1:] {
			st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtime.PodIP{Ip: ip})
		}
	}
	return st
}

func sandboxState(rec lifecycle.SandboxRecord) runtime.PodSandboxState {
	if rec.State == lifecycle.StateReady {
		return runtime.PodSandboxState_SANDBOX_READY
	}
	return runtime.PodSandboxState_SANDBOX_NOTREADY
}

// effectiveNamespaceOptions are the namespace modes a sandbox runs with: the
// requested ones, POD for anything not asked for.
func effectiveNamespaceOptions(cfg *runtime.PodSandboxConfig) *runtime.NamespaceOption {
	o := podsandbox.NamespaceOptions(cfg)
	return &runtime.NamespaceOption{
		Network: o.GetNetwork(),
		Pid:     o.GetPid(),
		Ipc:     o.GetIpc(),
	}
}
