//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The benchmark is a test of this package so that it runs the real daemon
// exactly as the e2e tests do; it runs only under `make bench`
// (MINICRI_BENCH=1) and prints a table instead of asserting times.

// benchRow is one line of the table: a measure, minicri's value, the floor
// (the raw runtime doing the same work) and the goal.
type benchRow struct {
	measure string
	value   float64
	floor   float64 // 0: no floor
	unit    string
	goal    string
}

var benchRows []benchRow

// floorGoal is the goal column of a floor's own row: it is what minicri's
// rows are measured against, not a figure of minicri's.
const floorGoal = "reference (the raw tool)"

func addBenchRow(r benchRow) { benchRows = append(benchRows, r) }

func TestBench(t *testing.T) {
	if os.Getenv("MINICRI_BENCH") == "" {
		t.Skip("benchmarks run with make bench (MINICRI_BENCH=1)")
	}
	if n, _ := strconv.Atoi(os.Getenv("MINICRI_BENCH_PODS")); n > 0 {
		// make bench SCALE=N: the node-scale bench (bench_node_test.go).
		t.Run("Node", func(t *testing.T) { benchNodeScale(t, n) })
		printBenchTable()
		return
	}
	t.Run("PodLifecycle", benchPodLifecycle)
	t.Run("Tracing", benchTracing) // bench_tracing_test.go
	t.Run("Exec", benchExec)
	t.Run("ExecStreams", benchExecStreams) // bench_exec_streams_test.go
	t.Run("StreamLists", benchStreamLists) // bench_stream_test.go
	t.Run("NRI", benchNRI)                 // bench_nri_test.go

	t.Run("SignaturePolicy", benchSignaturePolicy) // bench_sigpolicy_test.go
	t.Run("CreatePolicy", benchCreatePolicy)       // bench_sigpolicy_test.go
	printBenchTable()
}

func printBenchTable() {
	fmt.Printf("\n%-62s %12s %12s %8s   %s\n", "measure", "minicri", "floor", "ratio", "goal")
	for _, r := range benchRows {
		floor, ratio := "-", "-"
		if r.floor > 0 {
			floor = fmt.Sprintf("%.2f %s", r.floor, r.unit)
			ratio = fmt.Sprintf("%.2f", r.value/r.floor)
		}
		fmt.Printf("%-62s %12s %12s %8s   %s\n", r.measure, fmt.Sprintf("%.2f %s", r.value, r.unit), floor, ratio, r.goal)
	}
	fmt.Println()
}

const benchPods = 20

// benchPodLifecycle measures pod + container start, the memory of the
// daemon and its helpers with 20 pods running, and stop + remove, each pod
// on the CNI bridge with one busybox container.
func benchPodLifecycle(t *testing.T) {
	dirs, floor := benchNodeDirs(t)
	d := StartDaemon(t, append(dirs, WithArgs("--log-level", "info"))...)
	ref := busyboxRef(t)
	d.pull(t, ref)
	d.bridgeNetwork(t)
	ctx := context.Background()

	var starts, stops []time.Duration
	pods := make([]string, 0, benchPods)
	for i := 0; i < benchPods; i++ {
		cfg := d.podConfig(fmt.Sprintf("bench-%d", i))
		// As the kubelet runs most pods: a PID namespace per container, so
		// no infra process.
		cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_CONTAINER}}
		begin := time.Now()
		pod, err := d.Runtime.RunPodSandbox(ctx, cfg, "")
		if err != nil {
			t.Fatal(err)
		}
		id, err := d.Runtime.CreateContainer(ctx, pod, containerConfig("c", ref, "sleep", "3600"), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Runtime.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
		starts = append(starts, time.Since(begin))
		pods = append(pods, pod)
	}
	addBenchRow(benchRow{measure: "pod + container start, p50", value: ms(p50(starts)), floor: ms(runcStartFloor(t, floor)), unit: "ms", goal: "<= 100 ms"})

	pss := pssOfTree(t, d.cmd.Process.Pid)
	addBenchRow(benchRow{measure: fmt.Sprintf("daemon + helpers, %d pods, PSS", benchPods), value: float64(pss) / 1024, unit: "MiB", goal: "<= 60 MiB"})
	monitors := monitorPSS(t)
	if len(monitors) > 0 {
		var sum int
		for _, kb := range monitors {
			sum += kb
		}
		// Per container, not per monitor: a shared monitor serves several.
		addBenchRow(benchRow{measure: fmt.Sprintf("monitor PSS per container (%d monitors)", len(monitors)), value: float64(sum) / float64(benchPods), unit: "KiB", goal: "<= C conmon (~420 KiB at 20)"})
	}

	for _, pod := range pods {
		begin := time.Now()
		if err := d.Runtime.StopPodSandbox(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if err := d.Runtime.RemovePodSandbox(ctx, pod); err != nil {
			t.Fatal(err)
		}
		stops = append(stops, time.Since(begin))
	}
	addBenchRow(benchRow{measure: "stop + remove, per pod, p50", value: ms(p50(stops)), unit: "ms", goal: "<= 100 ms"})
}

// runcStartFloor is what runc alone takes to create and start a busybox
// container from a ready bundle, and to delete it: the floor of a start. It
// is the daemon's default handler's runc (defaultRunc), so that the floor
// and the pods it is set against start their containers with one binary.
// Its bundle is made under parent.
func runcStartFloor(t *testing.T, parent string) time.Duration {
	dir := runcFloorBundle(t, parent)
	var times []time.Duration
	for i := 0; i < 10; i++ {
		times = append(times, runcRunOnce(t, dir, fmt.Sprintf("floor%d", i)))
	}
	return p50(times)
}

// runcFloorBundle makes a bundle of busybox's sleep for the start floor, in
// a new dir under parent.
func runcFloorBundle(t *testing.T, parent string) string {
	dir, err := os.MkdirTemp(parent, "runc-floor-")
	if err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(dir, "rootfs")
	for _, sub := range []string{"bin", "proc", "dev", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("cp", "/bin/busybox", filepath.Join(rootfs, "bin/sleep")).CombinedOutput(); err != nil {
		t.Fatalf("cp busybox: %v %s", err, out)
	}
	if out, err := exec.Command(defaultRunc(), "spec", "--bundle", dir).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v %s", err, out)
	}
	spec, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	spec = []byte(strings.Replace(string(spec), `"sh"`, `"/bin/sleep", "3600"`, 1))
	spec = []byte(strings.Replace(string(spec), `"terminal": true`, `"terminal": false`, 1))
	if err := os.WriteFile(filepath.Join(dir, "config.json"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runcRunOnce times one `runc run --detach` of the bundle, then deletes the
// container (not timed).
func runcRunOnce(t *testing.T, dir, id string) time.Duration {
	root := filepath.Join(dir, "state")
	begin := time.Now()
	// stdio on /dev/null: a detached container keeps its stdio open,
	// so capturing runc's output would wait for the container to end.
	run := exec.Command(defaultRunc(), "--root", root, "--log", filepath.Join(dir, "runc.log"), "run", "--detach", "--bundle", dir, id)
	if err := run.Run(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "runc.log"))
		t.Fatalf("runc run: %v %s", err, log)
	}
	took := time.Since(begin)
	_ = exec.Command(defaultRunc(), "--root", root, "delete", "--force", id).Run()
	return took
}

// pssOfTree sums the proportional memory of the daemon and of every
// minicri-conmon process (monitors and infra processes), in KiB.
func pssOfTree(t *testing.T, daemonPID int) int {
	total := pssKB(daemonPID)
	for _, kb := range monitorPSS(t) {
		total += kb
	}
	return total
}

// monitorPSS lists the PSS of each minicri-conmon process of this run, in KiB.
func monitorPSS(t *testing.T) []int {
	var out []int
	exe := filepath.Join(binDir, "minicri-conmon")
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		if target, err := os.Readlink(p + "/exe"); err != nil || target != exe {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(p))
		out = append(out, pssKB(pid))
	}
	return out
}

func pssKB(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
			kb, _ := strconv.Atoi(f[1])
			return kb
		}
	}
	return 0
}

// runcExec is the raw runtime's exec of args in container id of d, with
// the binary and state dir of the handler that runs it (the daemon's
// default is runc-current where hack/build-runc.sh installed it, not
// Debian's runc): the floor of an ExecSync.
func runcExec(t testing.TB, d *Daemon, id string, args ...string) *exec.Cmd {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(d.RunDir, "runtime", "*", id))
	if len(dirs) != 1 {
		t.Fatalf("the runtime state of container %s: %v", id, dirs)
	}
	root := filepath.Dir(dirs[0])
	bin := filepath.Base(root)
	if bin == usernsHandler {
		bin = currentRunc
	}
	return exec.Command(bin, append([]string{"--root", root, "exec", id}, args...)...)
}

func p50(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
