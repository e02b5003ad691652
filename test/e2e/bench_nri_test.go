//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// benchNRIRuns is how many pod starts and ExecSyncs each setting is timed
// for, after benchNRIWarmUp untimed ones.
const (
	benchNRIRuns   = 30
	benchNRIWarmUp = 3
)

// nriBenchSetting is one daemon of benchNRI and its timings.
type nriBenchSetting struct {
	name    string
	config  string // the daemon's config file; "" the defaults
	plugin  bool   // a logger plugin connected
	env     *execEnv
	sleeper string
	starts  []time.Duration
	execs   []time.Duration
}

// benchNRI measures what NRI adds to a pod + container start and to an
// ExecSync: three daemons side by side, with NRI disabled, enabled with no
// plugin (the default), and enabled with the e2e plugin connected as a
// logger (every event, no adjustment). The rounds take the three in turn,
// each round beginning with the next, so that the load of a shared machine
// falls on each alike.
func benchNRI(t *testing.T) {
	bin := buildNRIPlugin(t)
	settings := []*nriBenchSetting{
		{name: "NRI off", config: "[nri]\nenabled = false\n"},
		{name: "NRI on, no plugin"},
		{name: "NRI on, logger plugin", plugin: true},
	}
	for _, s := range settings {
		opts := []DaemonOption{WithArgs("--log-level", "info")}
		if s.config != "" {
			opts = append(opts, WithConfig(s.config))
		}
		s.env = newExecEnv(t, opts...)
		s.sleeper = s.env.sleeper(t, "bench")
		_, err := os.Stat(s.env.d.NRISocket)
		if enabled := err == nil; enabled != (s.config == "") {
			t.Fatalf("%s: NRI socket %s: %v", s.name, s.env.d.NRISocket, err)
		}
		if s.plugin {
			p := startNRIPlugin(t, bin, s.env.d, "-adjust=false")
			p.waitEvent(t, "Synchronize pods=1 containers=1")
		}
	}
	ctx := context.Background()
	var execFloor []time.Duration
	for i := 0; i < benchNRIWarmUp+benchNRIRuns; i++ {
		timed := i >= benchNRIWarmUp
		// Each round begins with the next setting: none is always first.
		for k := range settings {
			s := settings[(i+k)%len(settings)]
			start := s.podStart(t, fmt.Sprintf("nri-bench-%d", i))
			begin := time.Now()
			if _, _, err := s.env.d.Runtime.ExecSync(ctx, s.sleeper, []string{"true"}, 10*time.Second); err != nil {
				t.Fatalf("%s: ExecSync: %v", s.name, err)
			}
			if timed {
				s.starts, s.execs = append(s.starts, start), append(s.execs, time.Since(begin))
			}
		}
		begin := time.Now()
		if out, err := runcExec(t, settings[0].env.d, settings[0].sleeper, "true").CombinedOutput(); err != nil {
			t.Fatalf("runc exec: %v: %s", err, out)
		}
		if timed {
			execFloor = append(execFloor, time.Since(begin))
		}
	}
	startFloor := ms(runcStartFloor(t, t.TempDir()))
	for _, s := range settings {
		addBenchRow(benchRow{measure: fmt.Sprintf("pod + container start, host network, %s, p50", s.name), value: ms(p50(s.starts)), floor: startFloor, unit: "ms", goal: nriBenchGoal(s, "<= runc run -d + 15 ms")})
	}
	for _, s := range settings {
		addBenchRow(benchRow{measure: fmt.Sprintf("ExecSync `true`, %s, p50", s.name), value: ms(p50(s.execs)), floor: ms(p50(execFloor)), unit: "ms", goal: nriBenchGoal(s, "<= 1.15 x runc exec")})
	}
}

// nriBenchGoal is a row's goal: offGoal for NRI off, the reference of the
// other two; a plugin that hears every event may cost a little.
func nriBenchGoal(s *nriBenchSetting, offGoal string) string {
	switch {
	case s.plugin:
		return "<= 1.2 x NRI off"
	case s.config == "":
		return "~ NRI off"
	}
	return offGoal
}

// podStart times the run of a host-network pod and the create and start
// of its container, then stops and removes the pod untimed.
func (s *nriBenchSetting) podStart(t *testing.T, name string) time.Duration {
	t.Helper()
	d, ctx := s.env.d, context.Background()
	cfg := d.hostNetworkPod(name)
	// As the kubelet runs most pods: no infra process.
	cfg.Linux.SecurityContext.NamespaceOptions.Pid = runtime.NamespaceMode_CONTAINER
	begin := time.Now()
	pod, err := d.Runtime.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		t.Fatalf("%s: RunPodSandbox: %v", s.name, err)
	}
	id, err := d.Runtime.CreateContainer(ctx, pod, containerConfig("c", s.env.ref, "sleep", "3600"), cfg)
	if err != nil {
		t.Fatalf("%s: CreateContainer: %v", s.name, err)
	}
	if err := d.Runtime.StartContainer(ctx, id); err != nil {
		t.Fatalf("%s: StartContainer: %v", s.name, err)
	}
	took := time.Since(begin)
	if err := d.Runtime.StopPodSandbox(ctx, pod); err != nil {
		t.Fatalf("%s: StopPodSandbox: %v", s.name, err)
	}
	if err := d.Runtime.RemovePodSandbox(ctx, pod); err != nil {
		t.Fatalf("%s: RemovePodSandbox: %v", s.name, err)
	}
	return took
}
