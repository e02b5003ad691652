//go:build e2e

package e2e

import (
	"context"
	"fmt"
	goruntime "runtime"
	"testing"
	"time"
)

// benchStreamLists is the Stream list RPCs against their List twins at 200
// containers (the node of stream_lists_test.go), each through the
// kubelet's own client, with streaming on and off: the time to the last
// item as the client sees it, as the daemon timed the call, and the bytes
// each side allocates per call. Alone:
//
//	MINICRI_BENCH=1 MINICRI_BIN_DIR=$PWD/bin/e2e go test -tags e2e -run '^TestBench$/^StreamLists$' -v ./test/e2e/
func benchStreamLists(t *testing.T) {
	addr := freeLoopbackAddr(t)
	n := newStreamNode(t, WithArgs("--metrics-address", addr))
	b := &nodeBench{t: t, d: n.d, metrics: "http://" + addr + "/metrics"}
	ctx := context.Background()
	off, on := n.d.Runtime, n.on
	// The goals of the List twin: its time as the client sees it, then
	// what the client and the daemon allocate per call, at this node's 200
	// containers (the allocations about a third over the 2026-11 figures).
	type listGoals struct{ time, client, daemon string }
	pairs := []struct {
		list, stream string
		calls        int
		off, on      func() (int, error)
		goals        listGoals
	}{
		{"ListContainers", "StreamContainers", 200,
			func() (int, error) { r, err := off.ListContainers(ctx, nil); return len(r), err },
			func() (int, error) { r, err := on.ListContainers(ctx, nil); return len(r), err },
			listGoals{"< 1 ms", "<= 350 KiB", "<= 32 KiB"}},
		{"ListPodSandbox", "StreamPodSandboxes", 200,
			func() (int, error) { r, err := off.ListPodSandbox(ctx, nil); return len(r), err },
			func() (int, error) { r, err := on.ListPodSandbox(ctx, nil); return len(r), err },
			listGoals{"< 1 ms", "<= 64 KiB", "<= 40 KiB"}},
		{"ListImages", "StreamImages", 200,
			func() (int, error) { r, err := n.d.Images.ListImages(ctx, nil); return len(r), err },
			func() (int, error) { r, err := n.imagesOn.ListImages(ctx, nil); return len(r), err },
			listGoals{"< 0.5 ms", "<= 16 KiB", "<= 24 KiB"}},
		{"ListContainerStats", "StreamContainerStats", 20,
			func() (int, error) { r, err := off.ListContainerStats(ctx, nil); return len(r), err },
			func() (int, error) { r, err := on.ListContainerStats(ctx, nil); return len(r), err },
			listGoals{"<= 0.5 ms a container", "<= 600 KiB", "<= 120 KiB a container"}},
		{"ListPodSandboxStats", "StreamPodSandboxStats", 20,
			func() (int, error) { r, err := off.ListPodSandboxStats(ctx, nil); return len(r), err },
			func() (int, error) { r, err := on.ListPodSandboxStats(ctx, nil); return len(r), err },
			listGoals{"<= 0.5 ms a container", "<= 550 KiB", "<= 180 KiB a container"}},
		{"ListPodSandboxMetrics", "StreamPodSandboxMetrics", 20,
			func() (int, error) { r, err := off.ListPodSandboxMetrics(ctx); return len(r), err },
			func() (int, error) { r, err := on.ListPodSandboxMetrics(ctx); return len(r), err },
			listGoals{"<= 0.5 ms a container", "<= 5.5 MiB", "<= 200 KiB a container"}},
	}
	for _, p := range pairs {
		// Interleaved, a round of each in turn: the machine is shared.
		var listTimes, streamTimes []time.Duration
		var listBytes, streamBytes clientDaemonBytes
		before := b.scrapePhases()
		for round := 0; round < 5; round++ {
			listTimes = append(listTimes, b.timeCalls(p.list, p.calls/5, p.off, &listBytes)...)
			streamTimes = append(streamTimes, b.timeCalls(p.stream, p.calls/5, p.on, &streamBytes)...)
		}
		label := fmt.Sprintf("200 containers, %d calls", p.calls)
		addBenchRow(benchRow{measure: fmt.Sprintf("%s, %s, p50", p.list, label), value: ms(p50(listTimes)), unit: "ms", goal: p.goals.time})
		addBenchRow(benchRow{measure: fmt.Sprintf("%s, %s, p50", p.stream, label), value: ms(p50(streamTimes)), floor: ms(p50(listTimes)), unit: "ms", goal: "~ its List twin"})
		addBenchRow(benchRow{measure: "  client KiB allocated per " + p.list, value: listBytes.client / float64(p.calls) / 1024, unit: "KiB", goal: p.goals.client})
		addBenchRow(benchRow{measure: "  client KiB allocated per " + p.stream, value: streamBytes.client / float64(p.calls) / 1024, floor: listBytes.client / float64(p.calls) / 1024, unit: "KiB", goal: "~ its List twin"})
		addBenchRow(benchRow{measure: "  daemon KiB allocated per " + p.list, value: listBytes.daemon / float64(p.calls) / 1024, unit: "KiB", goal: p.goals.daemon})
		// A stream's own state and batch buffers: 5 to 40 KiB more.
		addBenchRow(benchRow{measure: "  daemon KiB allocated per " + p.stream, value: streamBytes.daemon / float64(p.calls) / 1024, floor: listBytes.daemon / float64(p.calls) / 1024, unit: "KiB", goal: "<= its List twin + 48 KiB"})
		addPhaseRows(phaseDelta(before, b.scrapePhases()), "call/"+p.list, "call/"+p.stream)
	}
}

// clientDaemonBytes are the bytes allocated by this process (the client)
// and by the daemon.
type clientDaemonBytes struct{ client, daemon float64 }

// timeCalls makes n calls, each timed to its last item, and adds what they
// allocated to bytes.
func (b *nodeBench) timeCalls(what string, n int, call func() (int, error), bytes *clientDaemonBytes) []time.Duration {
	var mem goruntime.MemStats
	goruntime.ReadMemStats(&mem)
	clientBefore := mem.TotalAlloc
	daemonBefore := metricValue(b.t, httpGet(b.t, b.metrics), "go_memstats_alloc_bytes_total")
	times := make([]time.Duration, 0, n)
	for range n {
		begin := time.Now()
		got, err := call()
		if err != nil || got == 0 {
			b.t.Fatalf("%s: %d items, %v", what, got, err)
		}
		times = append(times, time.Since(begin))
	}
	goruntime.ReadMemStats(&mem)
	bytes.client += float64(mem.TotalAlloc - clientBefore)
	// The scrape itself allocates in the daemon too, the same for both.
	bytes.daemon += metricValue(b.t, httpGet(b.t, b.metrics), "go_memstats_alloc_bytes_total") - daemonBefore
	return times
}
