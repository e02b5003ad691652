package server

import (
	"net"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/lifecycle"
)

// A hostPort is not a bound socket but a DNAT rule (the CNI portmap plugin)
// for the node's own addresses, loopback included: it takes the port's
// connections from whatever process listens there. On the streaming
// server's port it would send every exec, attach and port-forward of the
// node to the pod. The kubelet's e2e suite met this: a restarted daemon's
// streaming server was given a free port that a pod's hostPort mapped.

// checkHostPorts refuses a pod whose TCP hostPort would take the streaming
// server's connections.
func (s *Server) checkHostPorts(cfg *runtime.PodSandboxConfig) error {
	if s.streams == nil {
		return nil
	}
	addr, ok := s.streams.Addr().(*net.TCPAddr)
	if !ok {
		return nil
	}
	for _, p := range cfg.GetPortMappings() {
		if p.GetProtocol() == runtime.Protocol_TCP && int(p.GetHostPort()) == addr.Port && mapsAddress(p.GetHostIp(), addr.IP) {
			return markf(errHostPortTaken,
				"config.port_mappings.host_port: %d is the port of minicri's streaming server (exec, attach, port-forward) on this node; a hostPort there would take its connections",
				addr.Port)
		}
	}
	return nil
}

// mapsAddress tells whether a port mapping for hostIP ("" for all of the
// node's addresses) catches connections to ip.
func mapsAddress(hostIP string, ip net.IP) bool {
	h := net.ParseIP(hostIP)
	return hostIP == "" || h.IsUnspecified() || h.Equal(ip) || (h.IsLoopback() && (ip.IsLoopback() || ip.IsUnspecified()))
}

// recoveredHostPorts are the TCP host ports of the sandboxes recovered at
// start: a streaming server on a port picked by the kernel must avoid them.
func (s *Server) recoveredHostPorts() []int {
	var ports []int
	for _, sb := range s.sandboxes.List() {
		if sb.State != lifecycle.StateReady {
			continue
		}
		cfg, err := sb.DecodeConfig()
		if err != nil {
			continue
		}
		for _, p := range cfg.GetPortMappings() {
			if p.GetProtocol() == runtime.Protocol_TCP && p.GetHostPort() > 0 {
				ports = append(ports, int(p.GetHostPort()))
			}
		}
	}
	return ports
}
