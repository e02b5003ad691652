package server

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/minicri/minicri/test/kubeletshape"
)

// BenchmarkListContainersKubeletClient is ListContainers of 200 containers
// as the kubelet makes it: its own CRI client, one connection, a unix
// socket, containers with the labels and annotations the kubelet sets. The
// node-scale bench (make bench SCALE=100) measures the same with the real
// daemon; this one runs without root in a second.
func BenchmarkListContainersKubeletClient(b *testing.B) {
	shapes := []struct {
		name   string
		config func(pod *runtime.PodSandboxConfig, name string) *runtime.ContainerConfig
	}{
		// As make bench SCALE=100 creates them.
		{"plain", func(_ *runtime.PodSandboxConfig, name string) *runtime.ContainerConfig { return ctrConfig(name) }},
		{"kubelet", kubeletLikeConfig},
	}
	for _, shape := range shapes {
		b.Run(shape.name, func(b *testing.B) {
			ts := newTestServer(b)
			for i := range 100 {
				pod := podConfig(fmt.Sprintf("web-%d", i))
				podID := ts.runPod(b, pod)
				for j := range 2 {
					ts.createCtr(b, podID, pod, shape.config(pod, fmt.Sprintf("c%d", j)))
				}
			}
			client := serveOverSocket(b, ts.Server)
			ctx := context.Background()
			for b.Loop() {
				got, err := client.ListContainers(ctx, nil)
				if err != nil || len(got) != 200 {
					b.Fatalf("ListContainers: %d containers, %v", len(got), err)
				}
			}
		})
	}
}

// kubeletLikeConfig is a container config with the labels and annotations
// the kubelet sets on every container it creates.
func kubeletLikeConfig(pod *runtime.PodSandboxConfig, name string) *runtime.ContainerConfig {
	cfg := ctrConfig(name)
	kubeletshape.Container(pod, cfg)
	return cfg
}

// serveOverSocket serves s's CRI on a unix socket as the daemon does and
// returns the kubelet's client of it.
func serveOverSocket(tb testing.TB, s *Server) internalapi.RuntimeService {
	tb.Helper()
	sock := filepath.Join(tb.TempDir(), "cri.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer(grpc.MaxRecvMsgSize(16<<20), grpc.MaxSendMsgSize(16<<20))
	s.Register(g)
	go g.Serve(lis)
	tb.Cleanup(g.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint("unix://" + sock).
		WithConnectionTimeout(10 * time.Second).WithTracerProvider(nil).WithUseStreaming(false).Build(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	return client
}
