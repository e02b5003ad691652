package server

import (
	"net"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/streaming"
)

func TestHostPortOnTheStreamingPortIsRefused(t *testing.T) {
	streams, err := streaming.New(streaming.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer streams.Close()
	s := &Server{streams: streams}
	port := int32(streams.Addr().(*net.TCPAddr).Port)
	cases := []struct {
		name string
		pm   *runtime.PortMapping
		want codes.Code
	}{
		{"all addresses", &runtime.PortMapping{Protocol: runtime.Protocol_TCP, ContainerPort: 80, HostPort: port}, codes.FailedPrecondition},
		{"loopback", &runtime.PortMapping{Protocol: runtime.Protocol_TCP, ContainerPort: 80, HostPort: port, HostIp: "127.0.0.1"}, codes.FailedPrecondition},
		{"0.0.0.0", &runtime.PortMapping{Protocol: runtime.Protocol_TCP, ContainerPort: 80, HostPort: port, HostIp: "0.0.0.0"}, codes.FailedPrecondition},
		{"another address", &runtime.PortMapping{Protocol: runtime.Protocol_TCP, ContainerPort: 80, HostPort: port, HostIp: "192.0.2.1"}, codes.OK},
		{"UDP", &runtime.PortMapping{Protocol: runtime.Protocol_UDP, ContainerPort: 80, HostPort: port}, codes.OK},
		{"another port", &runtime.PortMapping{Protocol: runtime.Protocol_TCP, ContainerPort: 80, HostPort: port + 1}, codes.OK},
	}
	for _, c := range cases {
		err := s.checkHostPorts(&runtime.PodSandboxConfig{PortMappings: []*runtime.PortMapping{c.pm}})
		if got := status.Code(toStatus(err)); got != c.want {
			t.Errorf("%s: %v (%v), want %v", c.name, got, err, c.want)
		}
	}
}
