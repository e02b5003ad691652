//go:build e2e && guest

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// guestStatsFromCRI turns on the kubelet's stats from the runtime: every
// figure of /stats/summary and /metrics/cadvisor then comes from minicri's
// ListPodSandboxStats, ListContainerStats and ListPodSandboxMetrics, not
// from cAdvisor.
const guestStatsFromCRI = `featureGates:
  PodAndContainerStatsFromCRI: true
`

// summaryPaths are the figures /stats/summary must have for every pod and
// every container, as JSON paths (k8s.io/kubelet/pkg/apis/stats/v1alpha1):
// CPU, memory, network, filesystem, pressure (PSI) and swap. A pod has no
// swap figure with stats from the CRI: the CRI's pod stats have no swap
// field, and kubelet v1.37 sums its containers' only when cAdvisor reports.
var (
	podSummaryPaths = []string{
		"cpu.usageCoreNanoSeconds", "cpu.psi.some", "memory.workingSetBytes", "memory.usageBytes", "memory.psi.some",
		"io.psi.some", "network.rxBytes", "network.txBytes", "network.interfaces", "ephemeral-storage.usedBytes",
		"process_stats.process_count",
	}
	containerSummaryPaths = []string{
		"cpu.usageCoreNanoSeconds", "cpu.psi.some", "memory.workingSetBytes", "memory.usageBytes", "memory.psi.some",
		"io.psi.some", "rootfs.usedBytes", "logs.usedBytes", "swap.swapUsageBytes",
	}
)

// TestGuestKubeletStatsFromCRI runs the guest's kubelet (systemd, cgroup
// v2) with PodAndContainerStatsFromCRI: /stats/summary has every figure for
// the pod and its containers, each within what the cgroup files say around
// it, and /metrics/cadvisor has cAdvisor's labels.
func TestGuestKubeletStatsFromCRI(t *testing.T) {
	g, d := guestTest(t)
	g.startKubelet(t, d, guestStatsFromCRI)

	// 8 MiB in /dev/shm: memory the container's cgroup is charged for.
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: statspod
  namespace: default
spec:
  containers:
  - name: a
    image: %[1]s
    imagePullPolicy: Never
    command: ["sh", "-c", "head -c 8388608 /dev/zero >/dev/shm/fill; echo filled; exec sleep 3600"]
  - name: b
    image: %[1]s
    imagePullPolicy: Never
    command: ["sh", "-c", "exec sleep 3600"]
`, guestBusyboxRef)
	g.WriteFile(t, "/etc/kubernetes/manifests/statspod.yaml", []byte(manifest), 0o644)
	pod := g.waitKubeletPod(t, "statspod", "Running", g.Timeout(90*time.Second), running)
	podCgroup := "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" +
		strings.ReplaceAll(string(pod.UID), "-", "_") + ".slice"
	ids := map[string]string{} // container name → ID
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(time.Minute))
	defer cancel()
	cs, err := d.Runtime.ListContainers(ctx, &runtime.ContainerFilter{
		State:         &runtime.ContainerStateValue{State: runtime.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(pod.UID)}})
	if err != nil || len(cs) != 2 {
		t.Fatalf("the static pod's running containers in minicri: %v %v", cs, err)
	}
	for _, c := range cs {
		ids[c.GetMetadata().GetName()] = c.GetId()
	}

	// The kubelet asks every few seconds; the first answers may lack a
	// rate or the network until the pod's second sample.
	var summary map[string]any
	var missing []string
	for deadline := time.Now().Add(g.Timeout(30 * time.Second)); ; time.Sleep(2 * time.Second) {
		summary, missing = nil, nil
		out, err := g.run(fmt.Sprintf("curl -sk --max-time %d https://127.0.0.1:10250/stats/summary", int(g.Timeout(10*time.Second).Seconds())))
		var sum struct{ Pods []map[string]any }
		if err != nil || json.Unmarshal([]byte(out), &sum) != nil {
			missing = []string{fmt.Sprintf("an answer: %v %.300s", err, out)}
		}
		for _, p := range sum.Pods {
			if name, _ := jsonAt(p, "podRef.name").(string); strings.HasPrefix(name, "statspod-") {
				summary = p
			}
		}
		if summary != nil {
			missing = summaryGaps(summary)
		} else if missing == nil {
			missing = []string{"the pod"}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if summary == nil {
		t.Fatalf("/stats/summary lacks %v", missing)
	}
	if len(missing) > 0 {
		pretty, _ := json.MarshalIndent(summary, "", " ")
		t.Errorf("/stats/summary lacks %v; the pod's part:\n%s", missing, pretty)
	}
	// Each figure within what the cgroup files say after it was taken:
	// counters only grow, and the 8 MiB stays charged.
	files := g.Run(t, fmt.Sprintf(`cd %s && for f in cpu.stat memory.current cpu.pressure memory.swap.current; do echo "== pod $f"; cat $f; done
cd %s && for f in cpu.stat memory.current cpu.pressure memory.swap.current; do echo "== a $f"; cat $f; done`,
		shellQuote(podCgroup), shellQuote(podCgroup+"/minicri-"+ids["a"]+".scope")))
	after := cgroupFigures(files)
	var a map[string]any
	containers, _ := jsonAt(summary, "containers").([]any)
	for _, c := range containers {
		if m, _ := c.(map[string]any); jsonAt(m, "name") == "a" {
			a = m
		}
	}
	checks := []struct {
		what      string
		got, hi   float64
		lo        float64
		sameValue bool
	}{
		{what: "pod CPU (ns)", got: num(summary, "cpu.usageCoreNanoSeconds"), lo: 1, hi: after["pod usage_usec"] * 1000},
		{what: "container a CPU (ns)", got: num(a, "cpu.usageCoreNanoSeconds"), lo: 1, hi: after["a usage_usec"] * 1000},
		{what: "pod memory usage", got: num(summary, "memory.usageBytes"), lo: 8 << 20, hi: after["pod memory.current"] + 16<<20},
		{what: "container a working set", got: num(a, "memory.workingSetBytes"), lo: 8 << 20, hi: after["a memory.current"] + 16<<20},
		// The summary's PSI totals are nanoseconds, the kernel's microseconds.
		{what: "pod CPU pressure, some (ns)", got: num(summary, "cpu.psi.some.total"), hi: after["pod cpu.pressure some"] * 1000},
		{what: "container a CPU pressure, some (ns)", got: num(a, "cpu.psi.some.total"), hi: after["a cpu.pressure some"] * 1000},
		{what: "container a swap", got: num(a, "swap.swapUsageBytes"), hi: after["a memory.swap.current"], lo: after["a memory.swap.current"]},
	}
	for _, c := range checks {
		if c.got < c.lo || c.got > c.hi {
			t.Errorf("%s = %.0f in /stats/summary, want within [%.0f, %.0f] (the cgroup files)", c.what, c.got, c.lo, c.hi)
		}
	}

	// /metrics/cadvisor, built from ListPodSandboxMetrics, with the labels
	// cAdvisor gives each container's series.
	// The kubelet builds it from one ListPodSandboxMetrics: slow under TCG.
	metrics := g.Run(t, fmt.Sprintf("curl -sk --max-time %d https://127.0.0.1:10250/metrics/cadvisor", int(g.Timeout(30*time.Second).Seconds())))
	for _, name := range []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes",
		"container_network_receive_bytes_total", "container_fs_usage_bytes", "container_memory_swap"} {
		series := regexp.MustCompile(`(?m)^`+name+`\{([^}]*)\} `).FindAllStringSubmatch(metrics, -1)
		found := false
		for _, s := range series {
			labels := s[1]
			if !strings.Contains(labels, `pod="`+pod.Name+`"`) {
				continue
			}
			found = true
			for _, l := range []string{`namespace="default"`, `id="`, `image="`, `name="`} {
				if !strings.Contains(labels, l) {
					t.Errorf("%s{%s}: no %s label", name, labels, l)
				}
			}
		}
		if !found {
			t.Errorf("/metrics/cadvisor has no %s of the pod", name)
		}
	}
	if !regexp.MustCompile(`container_cpu_usage_seconds_total\{[^}]*container="a"[^}]*pod="` + regexp.QuoteMeta(pod.Name) + `"`).MatchString(metrics) {
		t.Errorf("/metrics/cadvisor has no container_cpu_usage_seconds_total of container a with its container label")
	}
}

// summaryGaps lists the figures of summaryPaths a pod's summary lacks.
func summaryGaps(pod map[string]any) []string {
	var gaps []string
	for _, p := range podSummaryPaths {
		if jsonAt(pod, p) == nil {
			gaps = append(gaps, "pod "+p)
		}
	}
	containers, _ := jsonAt(pod, "containers").([]any)
	if len(containers) != 2 {
		return append(gaps, fmt.Sprintf("%d containers, want 2", len(containers)))
	}
	for _, c := range containers {
		m, _ := c.(map[string]any)
		for _, p := range containerSummaryPaths {
			if jsonAt(m, p) == nil {
				gaps = append(gaps, fmt.Sprintf("container %v %s", jsonAt(m, "name"), p))
			}
		}
	}
	return gaps
}

// jsonAt is the value at a dotted path of decoded JSON; nil if absent.
func jsonAt(v any, path string) any {
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func num(v any, path string) float64 {
	f, _ := jsonAt(v, path).(float64)
	return f
}

// cgroupFigures parses the output of the cat loop of
// TestGuestKubeletStatsFromCRI: "WHO usage_usec", "WHO memory.current",
// "WHO cpu.pressure some" (its total) and "WHO memory.swap.current".
func cgroupFigures(out string) map[string]float64 {
	figures := map[string]float64{}
	var who, file string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "==":
			who, file = f[1], f[2]
		case len(f) == 1:
			v, _ := strconv.ParseFloat(f[0], 64)
			figures[who+" "+file] = v
		case len(f) == 2 && f[0] == "usage_usec":
			v, _ := strconv.ParseFloat(f[1], 64)
			figures[who+" usage_usec"] = v
		case len(f) == 5 && f[0] == "some" && file == "cpu.pressure":
			v, _ := strconv.ParseFloat(strings.TrimPrefix(f[4], "total="), 64)
			figures[who+" cpu.pressure some"] = v
		}
	}
	return figures
}
