//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// rawClients talk to the daemon with the generated gRPC clients, not the
// kubelet's, so that a test can send what no kubelet would: nil configs,
// empty IDs, huge names.
func (d *Daemon) rawClients(t *testing.T) (runtime.RuntimeServiceClient, runtime.ImageServiceClient) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+d.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(16<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return runtime.NewRuntimeServiceClient(conn), runtime.NewImageServiceClient(conn)
}

// TestBadInputIsInvalidArgumentNamingTheField sends malformed requests of
// every kind the server reads: each must answer InvalidArgument naming the
// bad field, and none may leave a record, a directory, a mount or a
// process, or take the daemon down.
func TestBadInputIsInvalidArgumentNamingTheField(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	rt, img := d.rawClients(t)
	podCfg := d.hostNetworkPod("good")
	pod := d.runPod(t, podCfg)
	ctr := d.createContainer(t, pod, podCfg, containerConfig("good", ref, "true"))
	before := d.stateFiles(t)

	withPod := func(mod func(c *runtime.PodSandboxConfig)) *runtime.PodSandboxConfig {
		c := d.hostNetworkPod("bad")
		mod(c)
		return c
	}
	withContainer := func(mod func(c *runtime.ContainerConfig)) *runtime.ContainerConfig {
		c := containerConfig("bad", ref, "true")
		mod(c)
		return c
	}
	run := func(c *runtime.PodSandboxConfig) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := rt.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: c})
			return err
		}
	}
	create := func(podID string, c *runtime.ContainerConfig) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := rt.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: podID, Config: c, SandboxConfig: podCfg})
			return err
		}
	}
	huge := strings.Repeat("n", 1<<20)
	cases := []struct {
		name  string
		call  func(ctx context.Context) error
		field string
	}{
		{"pod: no config", run(nil), "config"},
		{"pod: no metadata", run(withPod(func(c *runtime.PodSandboxConfig) { c.Metadata = nil })), "config.metadata"},
		{"pod: empty name", run(withPod(func(c *runtime.PodSandboxConfig) { c.Metadata.Name = "" })), "config.metadata.name"},
		{"pod: huge name", run(withPod(func(c *runtime.PodSandboxConfig) { c.Metadata.Name = huge })), "config.metadata.name"},
		{"pod: namespace walking up", run(withPod(func(c *runtime.PodSandboxConfig) { c.Metadata.Namespace = ".." })), "config.metadata.namespace"},
		{"pod: log dir walking up", run(withPod(func(c *runtime.PodSandboxConfig) { c.LogDirectory = "/var/log/pods/../../../etc" })), "config.log_directory"},
		{"pod: negative overhead", run(withPod(func(c *runtime.PodSandboxConfig) {
			c.Linux.Overhead = &runtime.LinuxContainerResources{MemoryLimitInBytes: -1}
		})), "config.linux.overhead.memory_limit_in_bytes"},
		{"pod: unknown namespace mode", run(withPod(func(c *runtime.PodSandboxConfig) {
			c.Linux.SecurityContext.NamespaceOptions.Ipc = 99
		})), "config.linux.security_context.namespace_options.ipc"},
		{"pod: unknown protocol", run(withPod(func(c *runtime.PodSandboxConfig) {
			c.PortMappings = []*runtime.PortMapping{{Protocol: 7, ContainerPort: 80}}
		})), "config.port_mappings.protocol"},
		{"pod: DNS line injection", run(withPod(func(c *runtime.PodSandboxConfig) {
			c.DnsConfig = &runtime.DNSConfig{Servers: []string{"10.0.0.1\nnameserver 6.6.6.6"}}
		})), "config.dns_config.servers"},
		{"pod: unknown runtime handler", func(ctx context.Context) error {
			_, err := rt.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: d.hostNetworkPod("h"), RuntimeHandler: "../runc"})
			return err
		}, "runtime_handler"},

		{"container: empty pod ID", create("", containerConfig("c", ref, "true")), "pod_sandbox_id"},
		{"container: no config", create(pod, nil), "config"},
		{"container: no metadata", create(pod, withContainer(func(c *runtime.ContainerConfig) { c.Metadata = nil })), "config.metadata"},
		{"container: huge name", create(pod, withContainer(func(c *runtime.ContainerConfig) { c.Metadata.Name = huge })), "config.metadata.name"},
		{"container: no image", create(pod, withContainer(func(c *runtime.ContainerConfig) { c.Image = nil })), "config.image.image"},
		{"container: image name with a newline", create(pod, withContainer(func(c *runtime.ContainerConfig) { c.Image.Image = ref + "\nx" })), "config.image.image"},
		{"container: log path walking up", create(pod, withContainer(func(c *runtime.ContainerConfig) { c.LogPath = "../../../../etc/cron.d/x" })), "config.log_path"},
		{"container: absolute log path", create(pod, withContainer(func(c *runtime.ContainerConfig) { c.LogPath = "/etc/passwd" })), "config.log_path"},
		{"container: relative mount path", create(pod, withContainer(func(c *runtime.ContainerConfig) {
			c.Mounts = []*runtime.Mount{{ContainerPath: "data", HostPath: "/tmp"}}
		})), "config.mounts.container_path"},
		{"container: mount source walking up", create(pod, withContainer(func(c *runtime.ContainerConfig) {
			c.Mounts = []*runtime.Mount{{ContainerPath: "/data", HostPath: "/tmp/../etc"}}
		})), "config.mounts.host_path"},
		{"container: unknown propagation", create(pod, withContainer(func(c *runtime.ContainerConfig) {
			c.Mounts = []*runtime.Mount{{ContainerPath: "/data", HostPath: "/tmp", Propagation: 9}}
		})), "config.mounts.propagation"},
		{"container: negative memory", create(pod, withContainer(func(c *runtime.ContainerConfig) {
			c.Linux = &runtime.LinuxContainerConfig{Resources: &runtime.LinuxContainerResources{MemoryLimitInBytes: -5}}
		})), "config.linux.resources.memory_limit_in_bytes"},
		{"container: negative cpu shares", create(pod, withContainer(func(c *runtime.ContainerConfig) {
			c.Linux = &runtime.LinuxContainerConfig{Resources: &runtime.LinuxContainerResources{CpuShares: -1}}
		})), "config.linux.resources.cpu_shares"},
		{"container: unknown stop signal", create(pod, withContainer(func(c *runtime.ContainerConfig) { c.StopSignal = 1000 })), "config.stop_signal"},
		{"container: seccomp profile walking up", create(pod, withContainer(func(c *runtime.ContainerConfig) {
			c.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
				Seccomp: &runtime.SecurityProfile{ProfileType: runtime.SecurityProfile_Localhost, LocalhostRef: "/var/lib/kubelet/seccomp/../../../../etc/shadow"}}}
		})), "config.linux.security_context.seccomp.localhost_ref"},

		{"stop: empty ID", func(ctx context.Context) error {
			_, err := rt.StopContainer(ctx, &runtime.StopContainerRequest{})
			return err
		}, "container_id"},
		{"stop: negative timeout", func(ctx context.Context) error {
			_, err := rt.StopContainer(ctx, &runtime.StopContainerRequest{ContainerId: ctr, Timeout: -1})
			return err
		}, "timeout"},
		{"update: negative quota", func(ctx context.Context) error {
			_, err := rt.UpdateContainerResources(ctx, &runtime.UpdateContainerResourcesRequest{ContainerId: ctr, Linux: &runtime.LinuxContainerResources{CpuQuota: -2}})
			return err
		}, "linux.cpu_quota"},
		{"remove pod: empty ID", func(ctx context.Context) error {
			_, err := rt.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{})
			return err
		}, "pod_sandbox_id"},
		{"list containers: unknown state", func(ctx context.Context) error {
			_, err := rt.ListContainers(ctx, &runtime.ListContainersRequest{Filter: &runtime.ContainerFilter{State: &runtime.ContainerStateValue{State: 17}}})
			return err
		}, "filter.state.state"},

		{"pull: no image", func(ctx context.Context) error {
			_, err := img.PullImage(ctx, &runtime.PullImageRequest{})
			return err
		}, "image.image"},
		{"pull: control characters", func(ctx context.Context) error {
			_, err := img.PullImage(ctx, &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: "busybox\x00:latest"}})
			return err
		}, "image.image"},
		{"pull: unknown runtime handler", func(ctx context.Context) error {
			_, err := img.PullImage(ctx, &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: ref, RuntimeHandler: "kata"}})
			return err
		}, "image.runtime_handler"},
		{"create: host IPC in a pod with its own", create(pod, withContainer(func(c *runtime.ContainerConfig) {
			c.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Ipc: runtime.NamespaceMode_NODE}}}
		})), "config.linux.security_context.namespace_options.ipc"},
		{"create: user namespace without mappings", create(pod, withContainer(func(c *runtime.ContainerConfig) {
			c.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{NamespaceOptions: &runtime.NamespaceOption{UsernsOptions: &runtime.UserNamespace{Mode: runtime.NamespaceMode_POD}}}}
		})), "config.linux.security_context.namespace_options.userns_options.uids"},
		{"create: user namespace in a pod without one", create(pod, withContainer(func(c *runtime.ContainerConfig) {
			c.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{NamespaceOptions: &runtime.NamespaceOption{UsernsOptions: usernsOptions()}}}
		})), "config.linux.security_context.namespace_options.userns_options.mode"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := c.call(ctx)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.field+":") {
				t.Errorf("%.300s, want InvalidArgument naming %s", errorCode(err), c.field)
			}
		})
	}

	for _, name := range walkingImageNames {
		t.Run("image name "+name, func(t *testing.T) {
			_, err := rt.CreateContainer(context.Background(), &runtime.CreateContainerRequest{PodSandboxId: pod, Config: containerConfig("walk", name, "true"), SandboxConfig: podCfg})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "config.image.image:") {
				t.Errorf("CreateContainer with image %q: %.200s, want InvalidArgument naming config.image.image", name, errorCode(err))
			}
		})
	}

	if _, err := rt.Version(context.Background(), &runtime.VersionRequest{}); err != nil {
		t.Fatalf("daemon after the bad requests: %v", err)
	}
	if after := d.stateFiles(t); after != before {
		t.Errorf("refused requests changed the state:\nbefore: %s\nafter:  %s", before, after)
	}
	d.removeAll(t)
	d.assertNoLeaks(t, leakCheck{})
}

// walkingImageNames are references that try to walk up a path. Only names
// on a loopback registry: were one let through, the request would go no
// further than this host.
var walkingImageNames = []string{"127.0.0.1:1/../../etc/passwd", "127.0.0.1:1/a//b:latest", "127.0.0.1:1/a/b@sha256:../../x", "127.0.0.1:1/../x"}

// TestBadInputPullImageNamesAreInvalidArgument sends PullImage references
// that walk up a path: they must be refused as malformed before any
// registry is asked.
func TestBadInputPullImageNamesAreInvalidArgument(t *testing.T) {
	d := StartDaemon(t)
	_, img := d.rawClients(t)
	for _, name := range walkingImageNames {
		_, err := img.PullImage(context.Background(), &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: name}})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("PullImage(%q): %.200s, want InvalidArgument", name, errorCode(err))
		}
	}
}

// TestBadInputRulesAcceptRealPods makes sure the validation refuses no
// request a real kubelet sends: multi-line scripts in args (YAML block
// scalars), annotations with newlines (kubectl's last-applied-configuration)
// and big ones, certificates in environment variables.
func TestBadInputRulesAcceptRealPods(t *testing.T) {
	d := StartDaemon(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	cfg := d.hostNetworkPod("real")
	cfg.Annotations = map[string]string{
		"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"Pod"}` + "\n",
		"big": strings.Repeat("a", 100<<10),
	}
	pod := d.runPod(t, cfg)
	cc := containerConfig("script", ref, "sh", "-c")
	cc.Args = []string{"set -e\n\tfor i in 1 2; do\n\t\techo line $i\n\tdone\n\tprintf '%s' \"$CERT\" | wc -l\n"}
	cc.Envs = []*runtime.KeyValue{{Key: "CERT", Value: []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")}}
	cc.Annotations = map[string]string{"note": "two\nlines"}
	st, log := d.runToExit(t, pod, cfg, cc)
	if st.GetExitCode() != 0 || log != "line 1\nline 2\n3\n" {
		t.Errorf("multi-line script: exit %d, log %q", st.GetExitCode(), log)
	}
}
