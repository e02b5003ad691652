// Package testreq has requests of the shape the kubelet sends, for tests to
// change one field of, and the check that a request was refused for the
// field it names. Only tests import it.
package testreq

import (
	"errors"
	"strings"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/validate"
)

// Sandbox is a valid RunPodSandbox config with a field of most kinds set.
func Sandbox() *runtime.PodSandboxConfig {
	return &runtime.PodSandboxConfig{
		Metadata:     &runtime.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "8e1c0f", Attempt: 1},
		Hostname:     "web",
		LogDirectory: "/var/log/pods/default_web_8e1c0f",
		DnsConfig:    &runtime.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"default.svc.cluster.local"}, Options: []string{"ndots:5"}},
		PortMappings: []*runtime.PortMapping{{ContainerPort: 80, HostPort: 8080}},
		Linux: &runtime.LinuxPodSandboxConfig{
			CgroupParent: "/kubepods/besteffort/pod8e1c0f",
			Sysctls:      map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"},
		},
	}
}

// Container is a valid CreateContainer config with a field of most kinds set.
func Container() *runtime.ContainerConfig {
	return &runtime.ContainerConfig{
		Metadata: &runtime.ContainerMetadata{Name: "app"},
		Image:    &runtime.ImageSpec{Image: "busybox"},
		Command:  []string{"sh", "-c", "echo hi"},
		LogPath:  "app/0.log",
		Envs:     []*runtime.KeyValue{{Key: "A", Value: []byte("b")}},
		Mounts:   []*runtime.Mount{{ContainerPath: "/data", HostPath: "/srv/data"}},
		Linux: &runtime.LinuxContainerConfig{
			Resources: &runtime.LinuxContainerResources{MemoryLimitInBytes: 64 << 20, CpuQuota: -1, CpusetCpus: "0-1"},
		},
	}
}

// KubeletUserns is what the kubelet sends for hostUsers: false.
func KubeletUserns() *runtime.UserNamespace {
	return &runtime.UserNamespace{Mode: runtime.NamespaceMode_POD, Uids: IDMaps([3]uint32{0, 65536, 65536}), Gids: IDMaps([3]uint32{0, 65536, 65536})}
}

// IDMaps makes ID mappings of {container ID, host ID, length} triples.
func IDMaps(m ...[3]uint32) []*runtime.IDMapping {
	out := make([]*runtime.IDMapping, 0, len(m))
	for _, r := range m {
		out = append(out, &runtime.IDMapping{ContainerId: r[0], HostId: r[1], Length: r[2]})
	}
	return out
}

// CheckValidation fails t unless err is nil where field is "", and an
// invalid argument naming field otherwise.
func CheckValidation(t *testing.T, err error, field string) {
	t.Helper()
	if field == "" {
		if err != nil {
			t.Fatalf("valid config refused: %v", err)
		}
		return
	}
	if err == nil || !errors.Is(err, validate.ErrInvalid) {
		t.Fatalf("error = %v, want invalid argument naming %s", err, field)
	}
	if !strings.Contains(err.Error(), field+":") {
		t.Fatalf("error %q does not name field %s", err, field)
	}
}
