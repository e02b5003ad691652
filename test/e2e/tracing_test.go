//go:build e2e

package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/otlp"
	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// otlpReceiver is the test's own OTLP/gRPC trace receiver on 127.0.0.1: it
// keeps every span sent to it, with the service.name of its sender.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	Addr string

	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct {
	service string
	*tracev1.Span
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{Addr: l.Addr().String()}
	g := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(g, r)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	return r
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := stringAttr(rs.GetResource().GetAttributes(), "service.name")
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, receivedSpan{service: service, Span: s})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// inTrace returns the spans received so far of the trace traceID.
func (r *otlpReceiver) inTrace(traceID []byte) []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []receivedSpan
	for _, s := range r.spans {
		if slices.Equal(s.GetTraceId(), traceID) {
			out = append(out, s)
		}
	}
	return out
}

// waitForSpans waits until the trace holds a span of every name in names
// (minicri's, when service is set) and returns the trace's spans.
func (r *otlpReceiver) waitForSpans(t *testing.T, traceID []byte, service string, names ...string) []receivedSpan {
	t.Helper()
	var spans []receivedSpan
	var missing []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		spans = r.inTrace(traceID)
		missing = missing[:0]
		for _, name := range names {
			if findSpan(spans, service, name) == nil {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s, trace %x has no %s span %v; it has:\n%s", traceID, service, missing, describeSpans(spans))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func findSpan(spans []receivedSpan, service, name string) *receivedSpan {
	for i := range spans {
		if spans[i].GetName() == name && (service == "" || spans[i].service == service) {
			return &spans[i]
		}
	}
	return nil
}

func describeSpans(spans []receivedSpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s %q span %x parent %x\n", s.service, s.GetName(), s.GetSpanId(), s.GetParentSpanId())
	}
	return b.String()
}

// ancestors follows a span's parents within spans, up to the trace's root
// or a parent the receiver never got.
func ancestors(spans []receivedSpan, s *receivedSpan) []*receivedSpan {
	var out []*receivedSpan
	for len(s.GetParentSpanId()) > 0 {
		var parent *receivedSpan
		for i := range spans {
			if slices.Equal(spans[i].GetSpanId(), s.GetParentSpanId()) {
				parent = &spans[i]
			}
		}
		if parent == nil || slices.Contains(out, parent) {
			break
		}
		out = append(out, parent)
		s = parent
	}
	return out
}

func stringAttr(attrs []*commonv1.KeyValue, key string) string {
	for _, kv := range attrs {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// criClient is a plain gRPC CRI client on the daemon's socket, whose calls
// carry what the test puts in their context's metadata (a traceparent).
func criClient(t *testing.T, d *Daemon) (runtime.RuntimeServiceClient, runtime.ImageServiceClient) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+d.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return runtime.NewRuntimeServiceClient(conn), runtime.NewImageServiceClient(conn)
}

// withTraceparent is ctx carrying a W3C traceparent of a new sampled trace,
// as the kubelet's CRI client sends one; it returns the trace and span IDs.
func withTraceparent(ctx context.Context) (context.Context, []byte, []byte) {
	traceID, _ := hex.DecodeString(randomHex(16))
	spanID, _ := hex.DecodeString(randomHex(8))
	tp := fmt.Sprintf("00-%x-%x-01", traceID, spanID)
	return metadata.AppendToOutgoingContext(ctx, "traceparent", tp), traceID, spanID
}

// tracedPodStart runs a pod (CNI on a bridge), pulls busybox from a
// registry that demands auth, creates a container with env and starts it,
// runs an ExecSync, stops the container, then stops and removes the pod: all with one
// traceparent, on a daemon exporting to rcv with sampling_ratio 0 (so the
// spans are there because the caller sampled the trace). It returns the
// trace ID, the caller's span ID, and the secrets the calls carried.
func tracedPodStart(t *testing.T, rcv *otlpReceiver) (traceID, callerSpan []byte, secrets []string) {
	t.Helper()
	password, envSecret := "pw-"+randomHex(12), "env-"+randomHex(12)
	d := StartDaemon(t, WithArgs("--tracing-endpoint", rcv.Addr, "--tracing-sampling-ratio", "0"))
	d.bridgeNetwork(t)
	reg := registry.Start(t, registry.Options{Users: map[string]string{"tracer": password}})
	ref := pushImage(t, reg, "busybox:traced", testimage.Busybox(t), basicAuth("tracer", password)).ref
	rt, im := criClient(t, d)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctx, traceID, callerSpan = withTraceparent(ctx)
	podCfg := d.podConfig("traced")
	pod, err := rt.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: podCfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	podID := pod.GetPodSandboxId()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = d.Runtime.StopPodSandbox(ctx, podID)
		_ = d.Runtime.RemovePodSandbox(ctx, podID)
	})
	auth := &runtime.AuthConfig{Username: "tracer", Password: password}
	if _, err := im.PullImage(ctx, &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: ref}, Auth: auth}); err != nil {
		t.Fatalf("PullImage with auth: %v", err)
	}
	cfg := containerConfig("app", ref, "sh", "-c", "sleep 3600")
	cfg.Envs = []*runtime.KeyValue{{Key: "API_TOKEN", Value: []byte(envSecret)}}
	ctr, err := rt.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if _, err := rt.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: ctr.GetContainerId()}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	exec, err := rt.ExecSync(ctx, &runtime.ExecSyncRequest{ContainerId: ctr.GetContainerId(), Cmd: []string{"sh", "-c", "exit 3"}, Timeout: 30})
	if err != nil || exec.GetExitCode() != 3 {
		t.Fatalf("ExecSync: exit %d, %v; want exit 3", exec.GetExitCode(), err)
	}
	if _, err := rt.StopContainer(ctx, &runtime.StopContainerRequest{ContainerId: ctr.GetContainerId()}); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	if _, err := rt.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := rt.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	return traceID, callerSpan, []string{password, envSecret}
}

// TestTracingJoinsTheCallersTrace: a client that sends a traceparent with
// its CRI calls (as the kubelet does) gets minicri's spans in its trace:
// each call's span a child of the client's span, and the runtime's, CNI's
// and the pull's spans below the call that made them. With
// sampling_ratio 0, so it is the caller's sampling that counts.
func TestTracingJoinsTheCallersTrace(t *testing.T) {
	rcv := startOTLPReceiver(t)
	traceID, callerSpan, _ := tracedPodStart(t, rcv)
	under := map[string]string{
		"cni.add":        "runtime.v1.RuntimeService/RunPodSandbox",
		"image.pull":     "runtime.v1.ImageService/PullImage",
		"image.unpack":   "runtime.v1.ImageService/PullImage",
		"runtime.create": "runtime.v1.RuntimeService/CreateContainer",
		"runtime.start":  "runtime.v1.RuntimeService/StartContainer",
		"runtime.exec":   "runtime.v1.RuntimeService/ExecSync",
		"runtime.kill":   "runtime.v1.RuntimeService/StopContainer",
		"cni.del":        "runtime.v1.RuntimeService/StopPodSandbox",
		"runtime.delete": "runtime.v1.RuntimeService/RemovePodSandbox",
	}
	var names []string
	for child, call := range under {
		names = append(names, child, call)
	}
	spans := rcv.waitForSpans(t, traceID, "minicri", names...)
	for child, call := range under {
		c, p := findSpan(spans, "minicri", child), findSpan(spans, "minicri", call)
		if !slices.Contains(ancestors(spans, c), p) {
			t.Errorf("span %s is not below the %s call's span\n%s", child, call, describeSpans(spans))
		}
		if !slices.Equal(p.GetParentSpanId(), callerSpan) {
			t.Errorf("the %s call's span has parent %x, want the caller's span %x", call, p.GetParentSpanId(), callerSpan)
		}
	}
	exec := findSpan(spans, "minicri", "runtime.exec")
	if code := intAttr(exec.GetAttributes(), "process.exit.code"); code != 3 {
		t.Errorf("runtime.exec span's process.exit.code = %d, want 3", code)
	}
	if id := stringAttr(findSpan(spans, "minicri", "runtime.create").GetAttributes(), "minicri.container.id"); id == "" {
		t.Errorf("runtime.create span names no container")
	}
}

func intAttr(attrs []*commonv1.KeyValue, key string) int64 {
	for _, kv := range attrs {
		if kv.GetKey() == key {
			return kv.GetValue().GetIntValue()
		}
	}
	return -1
}

// TestTracingCarriesNoSecrets: a pull with credentials and a container
// with a secret in its environment leave neither in any span: attribute,
// event, link or status.
func TestTracingCarriesNoSecrets(t *testing.T) {
	rcv := startOTLPReceiver(t)
	traceID, _, secrets := tracedPodStart(t, rcv)
	spans := rcv.waitForSpans(t, traceID, "minicri", "runtime.v1.ImageService/PullImage", "image.pull",
		"runtime.v1.RuntimeService/CreateContainer", "runtime.create", "runtime.v1.RuntimeService/RemovePodSandbox")
	for _, s := range spans {
		text := s.Span.String() // every field: attributes, events, links, status
		for _, secret := range secrets {
			if strings.Contains(text, secret) {
				t.Errorf("span %q carries a secret of the calls (%s):\n%s", s.GetName(), secret, text)
			}
		}
	}
}

// TestTracingSilentCollectorHoldsNoCall: with the collector taking the
// connection and never answering, pod and container calls still answer
// (each within a generous 10 s) and SIGTERM still ends the daemon.
func TestTracingSilentCollectorHoldsNoCall(t *testing.T) {
	d := StartDaemon(t, WithArgs("--tracing-endpoint", otlp.Silent(t)))
	d.bridgeNetwork(t)
	ref := busyboxRef(t)
	d.pull(t, ref)
	rt, _ := criClient(t, d)
	for i := range 3 {
		call := func(name string, f func(ctx context.Context) error) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ctx, _, _ = withTraceparent(ctx)
			if err := f(ctx); err != nil {
				t.Fatalf("pod %d: %s with the collector silent: %v", i, name, err)
			}
		}
		podCfg := d.podConfig(fmt.Sprintf("silent-%d", i))
		var podID, ctrID string
		call("RunPodSandbox", func(ctx context.Context) error {
			r, err := rt.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: podCfg})
			podID = r.GetPodSandboxId()
			return err
		})
		call("CreateContainer", func(ctx context.Context) error {
			r, err := rt.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: podID, Config: containerConfig("c", ref, "sleep", "3600"), SandboxConfig: podCfg})
			ctrID = r.GetContainerId()
			return err
		})
		call("StartContainer", func(ctx context.Context) error {
			_, err := rt.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: ctrID})
			return err
		})
		call("StopPodSandbox", func(ctx context.Context) error {
			_, err := rt.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: podID})
			return err
		})
		call("RemovePodSandbox", func(ctx context.Context) error {
			_, err := rt.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: podID})
			return err
		})
	}
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(30 * time.Second); code != 0 {
		t.Fatalf("daemon exited %d at SIGTERM with the collector silent\n%s", code, d.Output())
	}
}

// TestSIGHUPDuringStartIsKept: a SIGHUP that comes while the daemon starts
// (here: while it waits for the state root's lock, before its recovery)
// does not kill it; it is applied once the server is up.
func TestSIGHUPDuringStartIsKept(t *testing.T) {
	d := NewDaemon(t)
	if err := os.MkdirAll(d.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(d.Root, "minicri.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	cmd := exec.Command(filepath.Join(binDir, "minicri"), d.args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("--- daemon output ---\n%s", out.String())
		}
	})
	waitFor(t, "the daemon to wait for the state root's lock", 20*time.Second, func() bool {
		return strings.Contains(out.String(), "waiting for the lock")
	})
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// Give a default-action SIGHUP the time to end the process before the
	// lock is let go: a few hundred ms is ample for the kernel.
	time.Sleep(500 * time.Millisecond)
	select {
	case <-exited:
		t.Fatalf("the daemon died of a SIGHUP during its start: %v", cmd.ProcessState)
	default:
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := waitForSocket(d.Socket, exited, 30*time.Second); err != nil {
		t.Fatalf("daemon did not come up after the SIGHUP: %v", err)
	}
	waitFor(t, "the early SIGHUP to be applied", 20*time.Second, func() bool {
		return strings.Contains(out.String(), "SIGHUP: configuration reloaded")
	})
}

// TestTracingCarriesNoClientText plants one token in every field of the
// CRI calls a client writes, but for the pod's name and namespace (which
// spans name): commands, arguments, environment, working dir, log path,
// mounts' host and container paths, labels and annotations of the pod and
// the container, image names and registry auth; in calls that succeed
// and in calls that fail, where runc's and the registry's error texts
// quote them: a create whose argv[0] does not exist, a create with a bind
// mount of a missing host path that cannot be shared, an ExecSync of a
// missing command, a pull of a missing image with auth. No span of the
// trace carries the token: not its name, attributes, events, links or
// status.
func TestTracingCarriesNoClientText(t *testing.T) {
	rcv := startOTLPReceiver(t)
	token := "tok" + randomHex(12)
	d := StartDaemon(t, WithArgs("--tracing-endpoint", rcv.Addr, "--tracing-sampling-ratio", "0"))
	d.bridgeNetwork(t)
	reg := registry.Start(t, registry.Options{Users: map[string]string{"user-" + token: "pass-" + token}})
	ref := pushImage(t, reg, token+":"+token, testimage.Busybox(t), basicAuth("user-"+token, "pass-"+token)).ref
	auth := &runtime.AuthConfig{Username: "user-" + token, Password: "pass-" + token}
	rt, im := criClient(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctx, traceID, _ := withTraceparent(ctx)
	planted := map[string]string{"label-" + token: "value-" + token}

	podCfg := d.podConfig("traced-text")
	podCfg.Labels, podCfg.Annotations = planted, planted
	pod, err := rt.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: podCfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	podID := pod.GetPodSandboxId()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = d.Runtime.StopPodSandbox(ctx, podID)
		_ = d.Runtime.RemovePodSandbox(ctx, podID)
	})
	if _, err := im.PullImage(ctx, &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: ref}, Auth: auth, SandboxConfig: podCfg}); err != nil {
		t.Fatalf("PullImage with auth: %v", err)
	}
	missing := reg.Host() + "/e2e/missing-" + token + ":" + token
	if _, err := im.PullImage(ctx, &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: missing}, Auth: auth}); err == nil {
		t.Fatalf("PullImage of %s succeeded", missing)
	}

	hostDir := filepath.Join(t.TempDir(), "host-"+token)
	if err := os.Mkdir(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctrCfg := func(name string, cmd ...string) *runtime.ContainerConfig {
		cfg := containerConfig(name, ref, cmd...)
		cfg.Args = []string{"arg-" + token}
		cfg.Envs = []*runtime.KeyValue{{Key: "ENV_" + token, Value: []byte("env-" + token)}}
		cfg.WorkingDir = "/work-" + token
		cfg.LogPath = name + "-" + token + ".log"
		cfg.Labels, cfg.Annotations = planted, planted
		cfg.Mounts = []*runtime.Mount{{HostPath: hostDir, ContainerPath: "/mnt-" + token}}
		return cfg
	}
	create := func(cfg *runtime.ContainerConfig) (string, error) {
		r, err := rt.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
		return r.GetContainerId(), err
	}
	id, err := create(ctrCfg("app", "sh", "-c", "sleep 3600 # "+token))
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if _, err := rt.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	if _, err := create(ctrCfg("noexec", "/cmd-"+token)); err == nil {
		t.Fatal("CreateContainer of a missing argv[0] succeeded")
	} else {
		t.Logf("create of a missing argv[0]: %v", err)
	}
	badMount := ctrCfg("badmount", "sh")
	badMount.Mounts = []*runtime.Mount{{HostPath: filepath.Join(t.TempDir(), "missing-"+token), ContainerPath: "/shared-" + token,
		Propagation: runtime.MountPropagation_PROPAGATION_BIDIRECTIONAL}}
	if _, err := create(badMount); err == nil {
		t.Fatal("CreateContainer of a bidirectional mount of a private host path succeeded")
	} else {
		t.Logf("create of a bad bind mount: %v", err)
	}
	if r, err := rt.ExecSync(ctx, &runtime.ExecSyncRequest{ContainerId: id, Cmd: []string{"/exec-" + token, "arg-" + token}, Timeout: 30}); err == nil && r.GetExitCode() == 0 {
		t.Fatal("ExecSync of a missing command succeeded")
	} else {
		t.Logf("ExecSync of a missing command: exit %d, %v", r.GetExitCode(), err)
	}
	if r, err := rt.ExecSync(ctx, &runtime.ExecSyncRequest{ContainerId: id, Cmd: []string{"sh", "-c", "echo " + token + "; exit 3"}, Timeout: 30}); err != nil || r.GetExitCode() != 3 {
		t.Fatalf("ExecSync: exit %d, %v; want exit 3", r.GetExitCode(), err)
	}

	var spans []receivedSpan
	want := map[string]int{"runtime.v1.ImageService/PullImage": 2, "image.pull": 2,
		"runtime.v1.RuntimeService/CreateContainer": 3, "runtime.v1.RuntimeService/ExecSync": 2, "runtime.exec": 2}
	waitFor(t, "the spans of every call", time.Minute, func() bool {
		spans = rcv.inTrace(traceID)
		for name, n := range want {
			count := 0
			for _, s := range spans {
				if s.GetName() == name && s.service == "minicri" {
					count++
				}
			}
			if count < n {
				return false
			}
		}
		return true
	})
	failed := 0
	for _, s := range spans {
		text := s.Span.String() // every field: name, attributes, events, links, status
		if strings.Contains(strings.ToLower(text), token) {
			t.Errorf("span %q carries client text (%s):\n%s", s.GetName(), token, text)
		}
		if s.GetStatus().GetCode() == tracev1.Status_STATUS_CODE_ERROR {
			failed++
		}
	}
	if failed == 0 {
		t.Errorf("no span is marked failed; the failed calls' spans must say they failed:\n%s", describeSpans(spans))
	}
}
