//go:build e2e && guest

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGuestBench is the node bench's rows on a production-shaped node
// (make bench GUEST=1): cgroup v2 only and the systemd driver, where the
// host has v1 beside an empty v2 tree. N pods of one sleeping container
// (MINICRI_BENCH_PODS, 25 unless set: under TCG a pod takes seconds to
// start and remove, so 100 take four times as long), then the stats calls
// the kubelet makes every 10-15 s with PodAndContainerStatsFromCRI, and
// each pod's stop and removal. The stats rows are per container, which the
// number of pods should not change.
//
// A TCG guest runs many times slower than the host, and the client's
// calls go through ssh's forwarding, so each row comes with floors
// measured in the same VM at the same time:
//   - a CRI Version call, the round trip that does no work;
//   - for the stats, one cat of the same cgroup files of every container
//     (what the cgroup library reads of each), timed within the guest, less
//     a cat of no file (the process start TCG makes costly);
//   - a fixed CPU job (sha256 of 16 MiB of zeros) in the guest and on the
//     host, whose ratio says how much slower the guest is.
//
// Under TCG on a busy host a pod's start and removal take seconds, so the
// run logs its progress, and every call is bounded.
//
// It is a measurement: it skips unless MINICRI_BENCH is set, so that the
// guest stage of make test does not run it.
func TestGuestBench(t *testing.T) {
	if os.Getenv("MINICRI_BENCH") == "" {
		t.Skip("the guest bench runs under make bench GUEST=1 (MINICRI_BENCH=1)")
	}
	pods := 25
	if n, _ := strconv.Atoi(os.Getenv("MINICRI_BENCH_PODS")); n > 0 {
		pods = n
	}
	g, d := guestTest(t)
	ctx := context.Background()
	t.Cleanup(func() { guestRemoveAll(t, g, d) })

	hostJob, guestJob := cpuJobTime(t, nil), cpuJobTime(t, g)
	addBenchRow(benchRow{measure: "guest: sha256 of 16 MiB (floor: the host's)", value: ms(guestJob), floor: ms(hostJob), unit: "ms", goal: floorGoal})

	var ids, ctrs, slices []string
	begin := time.Now()
	for i := 0; i < pods; i++ {
		if i > 0 && i%10 == 0 {
			t.Logf("%d of %d pods running after %v", i, pods, time.Since(begin).Round(time.Second))
		}
		cfg := guestPodConfig(fmt.Sprintf("bench-%d", i))
		cctx, cancel := context.WithTimeout(ctx, g.Timeout(time.Minute))
		id, err := d.Runtime.RunPodSandbox(cctx, cfg, "")
		if err != nil {
			cancel()
			t.Fatalf("RunPodSandbox %d: %v", i, err)
		}
		cid, err := d.Runtime.CreateContainer(cctx, id, guestContainer("c", "sleep", "3600"), cfg)
		if err == nil {
			err = d.Runtime.StartContainer(cctx, cid)
		}
		cancel()
		if err != nil {
			t.Fatalf("container of pod %d: %v", i, err)
		}
		ids, ctrs = append(ids, id), append(ctrs, cid)
		parent := cfg.GetLinux().GetCgroupParent()
		slices = append(slices, parent[strings.LastIndex(parent, "/")+1:])
	}

	t.Logf("%d pods running after %v", pods, time.Since(begin).Round(time.Second))

	// bounded is each call's context: no call waits past a scaled minute.
	bounded := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, g.Timeout(time.Minute))
	}
	version := func() error {
		cctx, cancel := bounded()
		defer cancel()
		_, err := d.Runtime.Version(cctx, "")
		return err
	}
	calls := []struct {
		name string
		call func(context.Context) (int, error)
	}{
		{"ListContainerStats", func(c context.Context) (int, error) {
			r, err := d.Runtime.ListContainerStats(c, nil)
			return len(r), err
		}},
		{"ListPodSandboxStats", func(c context.Context) (int, error) {
			r, err := d.Runtime.ListPodSandboxStats(c, nil)
			return len(r), err
		}},
		{"ListPodSandboxMetrics", func(c context.Context) (int, error) { r, err := d.Runtime.ListPodSandboxMetrics(c); return len(r), err }},
	}
	const rounds = 10
	for _, c := range calls {
		var times, trips []time.Duration
		for i := 0; i < rounds+1; i++ {
			cctx, cancel := bounded()
			begin := time.Now()
			n, err := c.call(cctx)
			took := time.Since(begin)
			cancel()
			if err != nil || n < pods {
				t.Fatalf("%s: %d items, %v; want %d", c.name, n, err, pods)
			}
			begin = time.Now()
			if err := version(); err != nil {
				t.Fatalf("Version: %v", err)
			}
			if i > 0 { // the first warms the caches
				times, trips = append(times, took), append(trips, time.Since(begin))
			}
		}
		// The call's own time, each container's share of it.
		per := (p50(times) - p50(trips)) / time.Duration(pods)
		addBenchRow(benchRow{measure: fmt.Sprintf("guest: %s, %d pods x 1, per container", c.name, pods), value: ms(per), unit: "ms", goal: "<= 0.5 ms a container (idle 2-core host)"})
	}
	floor := cgroupReadTime(t, g, slices, ctrs) / time.Duration(pods)
	addBenchRow(benchRow{measure: "guest: cat of each container's cgroup files (floor), per container", value: ms(floor), unit: "ms", goal: floorGoal})

	t.Logf("stats measured; stopping and removing %d pods", pods)

	var stops, removes, trips []time.Duration
	for i, id := range ids {
		if i > 0 && i%10 == 0 {
			t.Logf("%d of %d pods removed", i, pods)
		}
		cctx, cancel := context.WithTimeout(ctx, g.Timeout(time.Minute))
		begin := time.Now()
		err := d.Runtime.StopPodSandbox(cctx, id)
		stop := time.Since(begin)
		if err == nil {
			begin = time.Now()
			err = d.Runtime.RemovePodSandbox(cctx, id)
		}
		remove := time.Since(begin)
		cancel()
		if err != nil {
			t.Fatalf("stop and remove pod %s: %v", id, err)
		}
		begin = time.Now()
		if err := version(); err != nil {
			t.Fatalf("Version: %v", err)
		}
		stops, removes, trips = append(stops, stop), append(removes, remove), append(trips, time.Since(begin))
	}
	addBenchRow(benchRow{measure: "guest: CRI Version round trip (floor), p50", value: ms(p50(trips)), unit: "ms", goal: floorGoal})
	addBenchRow(benchRow{measure: fmt.Sprintf("guest: StopPodSandbox, %d pods x 1, p50", pods), value: ms(p50(stops)), floor: ms(p50(trips)), unit: "ms", goal: "<= CNI DEL + 15 ms (idle 2-core host)"})
	addBenchRow(benchRow{measure: fmt.Sprintf("guest: RemovePodSandbox, %d pods x 1, p50", pods), value: ms(p50(removes)), floor: ms(p50(trips)), unit: "ms", goal: "<= 25 ms at 100 pods (idle 2-core host)"})
	for _, s := range slices {
		g.Run(t, "systemctl stop "+s+" 2>/dev/null || true")
	}
	printBenchTable()
}

// cpuJobTime is the p50 of three runs of a fixed CPU job, timed where it
// runs: on the host (g nil) or within the guest.
func cpuJobTime(t *testing.T, g *Guest) time.Duration {
	const script = `a=$(date +%s%N); head -c 16777216 /dev/zero | sha256sum >/dev/null; b=$(date +%s%N); echo $((b-a))`
	var times []time.Duration
	for i := 0; i < 3; i++ {
		var out string
		if g == nil {
			b, err := exec.Command("bash", "-c", script).Output()
			if err != nil {
				t.Fatalf("host CPU job: %v", err)
			}
			out = string(b)
		} else {
			out = g.Run(t, script)
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if err != nil {
			t.Fatalf("CPU job: %q", out)
		}
		times = append(times, time.Duration(ns))
	}
	return p50(times)
}

// cgroupFiles are the files of a container's cgroup v2 that the stats
// calls read: CPU, memory, swap, processes, I/O and pressure.
var cgroupFiles = []string{"cpu.stat", "memory.current", "memory.stat", "memory.swap.current", "pids.current", "io.stat", "cpu.pressure", "memory.pressure", "io.pressure"}

// cgroupReadTime is the p50 of three timings, within the guest, of one cat
// of the cgroupFiles of every container, less a cat of /dev/null timed the
// same way: what is left is the reads, without the processes' start. A
// file that cat could not read fails the test (the floor would read less
// than minicri does), after the rows are kept.
func cgroupReadTime(t *testing.T, g *Guest, slices, ctrs []string) time.Duration {
	var paths strings.Builder
	for i, id := range ctrs {
		dir := "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/" + slices[i] + "/minicri-" + id + ".scope/"
		for _, f := range cgroupFiles {
			paths.WriteString(" " + dir + f)
		}
	}
	g.WriteFile(t, "/tmp/bench-cgroup-files", []byte(paths.String()), 0o644)
	const script = `f=$(cat /tmp/bench-cgroup-files); a=$(date +%s%N); cat /dev/null; b=$(date +%s%N); cat $f >/dev/null 2>/tmp/bench-cat.err; s=$?; c=$(date +%s%N); echo $((c-b-(b-a))) $s; head -3 /tmp/bench-cat.err`
	var times []time.Duration
	for i := 0; i < 3; i++ {
		out := g.Run(t, script)
		var ns int64
		var status int
		if _, err := fmt.Sscan(out, &ns, &status); err != nil {
			t.Fatalf("cgroup read: %q", out)
		}
		if status != 0 {
			t.Errorf("cgroup read: cat exited %d: %s", status, out)
		}
		times = append(times, time.Duration(ns))
	}
	return p50(times)
}

// guestRemoveAll stops and removes the bench's pods that the guest's
// minicri still has: what a failed bench left.
func guestRemoveAll(t *testing.T, g *Guest, d *Daemon) {
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(5*time.Minute))
	defer cancel()
	pods, err := d.Runtime.ListPodSandbox(ctx, nil)
	if err != nil {
		return
	}
	for _, p := range pods {
		if !strings.HasPrefix(p.GetMetadata().GetName(), "bench-") {
			continue
		}
		if err := d.Runtime.StopPodSandbox(ctx, p.Id); err != nil {
			t.Errorf("cleanup: StopPodSandbox %s: %v", p.Id, err)
		}
		if err := d.Runtime.RemovePodSandbox(ctx, p.Id); err != nil {
			t.Errorf("cleanup: RemovePodSandbox %s: %v", p.Id, err)
		}
	}
}
