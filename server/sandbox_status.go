package server

import (
	"context"
	"encoding/json"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSandboxStatus reports a sandbox's state, IPs and namespace modes.
func (s *Server) PodSandboxStatus(ctx context.Context, req *runtime.PodSandboxStatusRequest) (*runtime.PodSandboxStatusResponse, error) {
	rec, err := s.lookupSandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, toStatus(err)
	}
	cfg, err := rec.config()
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &runtime.PodSandboxStatusResponse{
		Status:    sandboxStatus(rec, cfg),
		Timestamp: time.Now().UnixNano(),
	}
	if req.GetVerbose() {
		info, _ := json.Marshal(struct {
			Record sandboxRecord             `json:"record"`
			Config *runtime.PodSandboxConfig `json:"config"`
		}{rec, cfg})
		resp.Info = map[string]string{"info": string(info)}
	}
	return resp, nil
}

func sandboxStatus(rec sandboxRecord, cfg *runtime.PodSandboxConfig) *runtime.PodSandboxStatus {
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

func sandboxState(rec sandboxRecord) runtime.PodSandboxState {
	if rec.State == stateReady {
		return runtime.PodSandboxState_SANDBOX_READY
	}
	return runtime.PodSandboxState_SANDBOX_NOTREADY
}

// effectiveNamespaceOptions are the namespace modes a sandbox runs with: the
// requested ones, POD for anything not asked for.
func effectiveNamespaceOptions(cfg *runtime.PodSandboxConfig) *runtime.NamespaceOption {
	o := namespaceOptions(cfg)
	return &runtime.NamespaceOption{
		Network: o.GetNetwork(),
		Pid:     o.GetPid(),
		Ipc:     o.GetIpc(),
	}
}
