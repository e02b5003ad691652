package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/internal/atomicfile"
	"github.com/minicri/minicri/network"
	"github.com/minicri/minicri/server/validate"
)

// RuntimeConfig tells the kubelet which cgroup driver to use, so that the two
// agree without the operator setting it twice.
func (s *Server) RuntimeConfig(ctx context.Context, req *runtime.RuntimeConfigRequest) (*runtime.RuntimeConfigResponse, error) {
	driver := runtime.CgroupDriver_CGROUPFS
	if s.cfg.CgroupDriver == config.SystemdDriver {
		driver = runtime.CgroupDriver_SYSTEMD
	}
	return &runtime.RuntimeConfigResponse{
		Linux: &runtime.LinuxRuntimeConfiguration{CgroupDriver: driver},
	}, nil
}

// UpdateRuntimeConfig takes the node's pod CIDR, which the kubelet sends on
// every node status sync when its podCIDR is set. The CIDR is kept across
// restarts and shown by Status(verbose); with cni.conf_template set, the
// pod network config is written from it (see network.WriteConfFromTemplate).
// An empty CIDR changes nothing, as in containerd.
func (s *Server) UpdateRuntimeConfig(ctx context.Context, req *runtime.UpdateRuntimeConfigRequest) (*runtime.UpdateRuntimeConfigResponse, error) {
	raw := req.GetRuntimeConfig().GetNetworkConfig().GetPodCidr()
	if raw == "" {
		return &runtime.UpdateRuntimeConfigResponse{}, nil
	}
	cidrs, err := parsePodCIDRs("runtime_config.network_config.pod_cidr", raw)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := s.netConfig.setPodCIDR(strings.Join(cidrs, ",")); err != nil {
		return nil, toStatus(fmt.Errorf("keep pod CIDR: %w", err))
	}
	if err := s.writeCNIConfFromTemplate(cidrs); err != nil {
		return nil, toStatus(err)
	}
	return &runtime.UpdateRuntimeConfigResponse{}, nil
}

// parsePodCIDRs splits the kubelet's pod CIDR, a comma-separated list on a
// dual-stack node, and checks each part.
func parsePodCIDRs(field, raw string) ([]string, error) {
	if err := validate.Printable(field, raw); err != nil {
		return nil, err
	}
	parts := strings.Split(raw, ",")
	if len(parts) > 2 {
		return nil, validate.Invalidf(field, "%q has %d CIDRs; a node has at most one per address family", raw, len(parts))
	}
	cidrs := make([]string, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if _, _, err := net.ParseCIDR(p); err != nil {
			return nil, validate.Invalidf(field, "%q is not a CIDR like 10.88.0.0/16", p)
		}
		cidrs = append(cidrs, p)
	}
	return cidrs, nil
}

// writeCNIConfFromTemplate writes the pod network config from
// cni.conf_template, when one is set.
func (s *Server) writeCNIConfFromTemplate(cidrs []string) error {
	if s.cfg.CNI.ConfTemplate == "" {
		return nil
	}
	if _, err := s.cniConf.WriteConfFromTemplate(s.cfg.CNI.ConfTemplate, network.NewTemplateValues(cidrs)); err != nil {
		return fmt.Errorf("write network config from cni.conf_template: %w", err)
	}
	return nil
}

// restoreRuntimeConfig reads the pod CIDR kept by an earlier daemon and,
// with a template, writes the network config again should it have gone:
// pods can get a network before the kubelet's next node status sync.
func (s *Server) restoreRuntimeConfig() error {
	s.netConfig.path = filepath.Join(s.cfg.Root, "runtime-config.json")
	cidr, err := s.netConfig.load()
	if err != nil || cidr == "" {
		return err
	}
	return s.writeCNIConfFromTemplate(strings.Split(cidr, ","))
}

// netConfig is what UpdateRuntimeConfig was told, kept in a file of the
// state root so that it survives a restart.
type netConfig struct {
	path string // ROOT/runtime-config.json

	mu      sync.Mutex
	podCIDR string
}

// netConfigRecord is the file's content.
type netConfigRecord struct {
	PodCIDR string `json:"podCIDR"`
}

func (n *netConfig) load() (string, error) {
	data, err := os.ReadFile(n.path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var rec netConfigRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return "", fmt.Errorf("read %s: %w", n.path, err)
	}
	if _, err := parsePodCIDRs("podCIDR", rec.PodCIDR); rec.PodCIDR != "" && err != nil {
		return "", fmt.Errorf("read %s: %w", n.path, err)
	}
	n.mu.Lock()
	n.podCIDR = rec.PodCIDR
	n.mu.Unlock()
	return rec.PodCIDR, nil
}

// setPodCIDR keeps cidr, writing the file only when it changed: the kubelet
// sends the same CIDR every few seconds.
func (n *netConfig) setPodCIDR(cidr string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cidr == n.podCIDR {
		return nil
	}
	data, err := json.Marshal(netConfigRecord{PodCIDR: cidr})
	if err != nil {
		return err
	}
	if err := atomicfile.Write(n.path, data, 0o600); err != nil {
		return err
	}
	n.podCIDR = cidr
	return nil
}

func (n *netConfig) PodCIDR() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.podCIDR
}
