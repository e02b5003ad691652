//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// benchTracingRuns is how many pod starts each setting is timed for, after
// benchTracingWarmUp untimed ones.
const (
	benchTracingRuns   = 30
	benchTracingWarmUp = 3
)

// benchTracing measures what tracing adds to a pod + container start on
// the CNI bridge: two daemons side by side, tracing off (the default) and
// on, exporting every call's spans (the calls bring a sampled traceparent,
// as a tracing kubelet's do) to an OTLP receiver of the test's own. Both
// get the same calls, the traceparent included; the rounds alternate which
// goes first.
func benchTracing(t *testing.T) {
	rcv := startOTLPReceiver(t)
	type setting struct {
		name   string
		d      *Daemon
		rt     runtime.RuntimeServiceClient
		ref    string
		starts []time.Duration
	}
	settings := []*setting{{name: "tracing off"}, {name: "tracing on, every call sampled"}}
	for i, s := range settings {
		opts := []DaemonOption{WithArgs("--log-level", "info")}
		if i == 1 {
			opts = append(opts, WithArgs("--tracing-endpoint", rcv.Addr))
		}
		s.d = StartDaemon(t, opts...)
		s.d.bridgeNetwork(t)
		s.ref = busyboxRef(t)
		s.d.pull(t, s.ref)
		s.rt, _ = criClient(t, s.d)
	}
	for i := 0; i < benchTracingWarmUp+benchTracingRuns; i++ {
		for k := range settings {
			s := settings[(i+k)%len(settings)]
			took := benchTracedPodStart(t, s.d, s.rt, s.ref, fmt.Sprintf("trace-bench-%d", i))
			if i >= benchTracingWarmUp {
				s.starts = append(s.starts, took)
			}
		}
	}
	// The spans did go out: the measure is of tracing that exports.
	waitFor(t, "the traced daemon's spans at the receiver", 30*time.Second, func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		return len(rcv.spans) >= benchTracingRuns*3
	})
	off := ms(p50(settings[0].starts))
	addBenchRow(benchRow{measure: "pod + container start, CNI, tracing off, p50", value: off, unit: "ms", goal: "<= 100 ms"})
	addBenchRow(benchRow{measure: "pod + container start, CNI, tracing on (exporting), p50", value: ms(p50(settings[1].starts)), floor: off, unit: "ms", goal: "<= 1.05 x tracing off"})
}

// benchTracedPodStart times RunPodSandbox, CreateContainer and
// StartContainer of a pod with a traceparent, then stops and removes the
// pod untimed.
func benchTracedPodStart(t *testing.T, d *Daemon, rt runtime.RuntimeServiceClient, ref, name string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx, _, _ = withTraceparent(ctx)
	cfg := d.podConfig(name)
	cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_CONTAINER}}
	begin := time.Now()
	pod, err := rt.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	ctr, err := rt.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: pod.GetPodSandboxId(), Config: containerConfig("c", ref, "sleep", "3600"), SandboxConfig: cfg})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if _, err := rt.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: ctr.GetContainerId()}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	took := time.Since(begin)
	if _, err := rt.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: pod.GetPodSandboxId()}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := rt.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: pod.GetPodSandboxId()}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	return took
}
