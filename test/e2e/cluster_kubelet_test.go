//go:build cluster

// What the cluster's kubelet asks of minicri that only a node under a
// cluster's load does: log rotation under a chatty pod, image pulls side by
// side, and the cgroup driver it takes from the runtime. The kubelet's
// configuration is kubeadm's, from hack/cluster.sh; the tests read what they
// depend on from the kubelet's /configz.
package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/minicri/minicri/test/testimage"
)

// clusterHostNode is the name of the node on this host (the control plane's):
// the one that is not the guest.
func clusterHostNode(t *testing.T, k clusterKubectl, env map[string]string) string {
	t.Helper()
	for _, n := range strings.Fields(k.must("", "get", "nodes", "-o", "jsonpath={.items[*].metadata.name}")) {
		if n != env["NODE2"] {
			return n
		}
	}
	t.Fatal("no node on this host")
	return ""
}

// clusterKubeletConfig is the configuration node's kubelet runs with, as its
// /configz tells through the API server: kubeadm's KubeletConfiguration and
// what the kubelet took from the runtime (the cgroup driver).
func clusterKubeletConfig(t *testing.T, k clusterKubectl, node string) map[string]any {
	t.Helper()
	raw := k.must("", "get", "--raw", "/api/v1/nodes/"+node+"/proxy/configz")
	var cz struct {
		KubeletConfig map[string]any `json:"kubeletconfig"`
	}
	if err := json.Unmarshal([]byte(raw), &cz); err != nil || cz.KubeletConfig == nil {
		t.Fatalf("the kubelet's /configz on %s: %v: %.300q", node, err, raw)
	}
	return cz.KubeletConfig
}

// TestClusterKubeletTakesTheRuntimesCgroupDriver checks that the host's
// kubelet and minicri agree on the cgroup driver: the one the kubelet runs
// with is the one minicri's RuntimeConfig answers (KEP-4033), asked here on
// minicri's socket as the kubelet asks it.
func TestClusterKubeletTakesTheRuntimesCgroupDriver(t *testing.T) {
	env := clusterEnv(t)
	k := clusterKubectl{t: t, env: env}
	endpoint := env["CRI_ENDPOINT"]
	if endpoint == "" {
		t.Fatalf("%s names no CRI_ENDPOINT", clusterEnvFile())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(10 * time.Second).
		WithTracerProvider(nil).WithUseStreaming(false).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rt.RuntimeConfig(ctx)
	if err != nil {
		t.Fatalf("RuntimeConfig on %s: %v", endpoint, err)
	}
	want := map[runtime.CgroupDriver]string{runtime.CgroupDriver_SYSTEMD: "systemd", runtime.CgroupDriver_CGROUPFS: "cgroupfs"}[rc.GetLinux().GetCgroupDriver()]
	host := clusterHostNode(t, k, env)
	if got := clusterKubeletConfig(t, k, host)["cgroupDriver"]; got != want {
		t.Errorf("the kubelet on %s runs with cgroupDriver %v; minicri's RuntimeConfig says %s", host, got, want)
	}
}

// TestClusterLogRotationUnderAChattyPod checks the kubelet's log rotation of
// a pod that writes fast: past containerLogMaxSize the kubelet renames the
// log, calls ReopenContainerLog and goes on with a new file; older files are
// compressed, and no more than containerLogMaxFiles are kept. Across the
// files kept, read in order as one stream (a partial line may continue in
// the next file, as CRI allows), no line is lost or repeated; the current
// file keeps growing, and kubectl logs serves it.
func TestClusterLogRotationUnderAChattyPod(t *testing.T) {
	env := clusterEnv(t)
	k := clusterKubectl{t: t, env: env}
	host := clusterHostNode(t, k, env)
	cfg := clusterKubeletConfig(t, k, host)
	maxSize, err := resource.ParseQuantity(fmt.Sprint(cfg["containerLogMaxSize"]))
	if err != nil {
		t.Fatalf("the kubelet's containerLogMaxSize %v: %v", cfg["containerLogMaxSize"], err)
	}
	maxFiles, _ := cfg["containerLogMaxFiles"].(float64)
	if maxFiles < 3 {
		t.Fatalf("the kubelet keeps %v log files: want 3 or more (hack/cluster.sh), to see a compressed one beside the last rotated", cfg["containerLogMaxFiles"])
	}
	img := clusterBusybox(t, env, "chatty")
	ns := clusterNamespace(t, k, "minicri-logs-")
	// About a thousand numbered lines of about 1 KiB a second, in bursts
	// of a hundred.
	k.must(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: chatty, namespace: %[1]s}
spec:
  nodeName: %[2]s
  terminationGracePeriodSeconds: 1
  containers:
  - name: chatty
    image: %[3]s
    command:
    - /bin/sh
    - -c
    - |
      p=$(head -c 1000 /dev/zero | tr '\0' x)
      i=0
      while :; do
        j=0
        while [ $j -lt 100 ]; do i=$((i+1)); j=$((j+1)); echo "line $i $p"; done
        usleep 100000
      done
`, ns, host, img), "apply", "-f", "-")
	k.waitOrDescribe(ns, "the pod chatty to be Ready", "wait", "--for=condition=Ready", "pod/chatty", "--timeout=180s")
	uid := strings.TrimSpace(k.must("", "-n", ns, "get", "pod", "chatty", "-o", "jsonpath={.metadata.uid}"))
	dir := filepath.Join("/var/log/pods", ns+"_chatty_"+uid, "chatty")

	// Wait for the files of three rotations or more: the current log, the
	// last rotated one, and older ones compressed, the oldest removed.
	seen := map[string]bool{}
	var state string
	var firstCurrent int
	check := func() bool {
		files, lines, err := clusterReadRotatedLogs(dir)
		if err != nil {
			state = err.Error()
			return false
		}
		for _, f := range files {
			seen[strings.TrimSuffix(f, ".gz")] = true
		}
		var gz, plain []string
		for _, f := range files[:len(files)-1] {
			if strings.HasSuffix(f, ".gz") {
				gz = append(gz, f)
			} else {
				plain = append(plain, f)
			}
		}
		state = fmt.Sprintf("files %v, %d rotations seen", files, len(seen)-1)
		if len(files) > int(maxFiles) {
			t.Fatalf("%s: %d log files, the kubelet keeps %d", dir, len(files), int(maxFiles))
		}
		if len(plain) != 1 || len(gz) != int(maxFiles)-2 || len(seen) <= int(maxFiles) {
			return false
		}
		nums, err := clusterLineNumbers(lines)
		if err != nil {
			t.Fatalf("%s: %v (files %v)", dir, err, files)
		}
		for i := 1; i < len(nums); i++ {
			if nums[i] != nums[i-1]+1 {
				t.Fatalf("%s: line %d follows line %d: lines lost or repeated across the rotations (files %v)", dir, nums[i], nums[i-1], files)
			}
		}
		current, err := clusterReadLogFile(filepath.Join(dir, "0.log"))
		if err != nil {
			state = err.Error()
			return false
		}
		cur, err := clusterLineNumbers(clusterLogLines(current))
		if err != nil || len(cur) == 0 {
			state = fmt.Sprintf("0.log: %d lines, %v", len(cur), err)
			return false
		}
		firstCurrent = cur[0]
		return true
	}
	for deadline := time.Now().Add(2 * time.Minute); !check(); time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no three rotations of %s (containerLogMaxSize %s) after 2 minutes: %s", dir, maxSize.String(), state)
		}
	}

	// kubectl logs reads the new file, and it grows. (Its last lines: the
	// very last may be the end of a line split into partial records.)
	tail := func() (int, string) {
		out := k.must("", "-n", ns, "logs", "chatty", "--tail=3")
		n := -1
		for _, l := range strings.Split(out, "\n") {
			var i int
			if _, err := fmt.Sscanf(l, "line %d", &i); err == nil && i > n {
				n = i
			}
		}
		return n, out
	}
	last, out := tail()
	if last < firstCurrent {
		t.Errorf("kubectl logs --tail=3 ends with line %d, before the first line %d of the current file: %.200q", last, firstCurrent, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for n, out := tail(); n <= last; n, out = tail() {
		if time.Now().After(deadline) {
			t.Fatalf("the log did not grow past line %d in 30 s: kubectl logs --tail=3 = %.200q", last, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// clusterReadRotatedLogs reads a container's log files in dir, oldest first
// (the compressed ones, the last rotated one, 0.log), as one list of lines.
// It fails when the kubelet is midway through a rotation (a .tmp file) or
// rotated while the files were read.
func clusterReadRotatedLogs(dir string) (files []string, lines []clusterLogLine, err error) {
	list := func() ([]string, error) {
		rotated, err := filepath.Glob(filepath.Join(dir, "0.log.*"))
		if err != nil {
			return nil, err
		}
		// The names end in the time of the rotation: their order is the
		// files' order.
		sort.Strings(rotated)
		for i, r := range rotated {
			// A compression under way: NAME.gz.tmp, or NAME.gz written
			// and NAME not yet removed.
			if strings.HasSuffix(r, ".tmp") || i+1 < len(rotated) && rotated[i+1] == r+".gz" {
				return nil, fmt.Errorf("the kubelet is compressing %s", filepath.Base(r))
			}
		}
		return append(rotated, filepath.Join(dir, "0.log")), nil
	}
	paths, err := list()
	if err != nil {
		return nil, nil, err
	}
	var records []byte
	for _, p := range paths {
		data, err := clusterReadLogFile(p)
		if err != nil {
			return nil, nil, err
		}
		records = append(records, data...)
	}
	again, err := list()
	if err != nil {
		return nil, nil, err
	}
	if fmt.Sprint(again) != fmt.Sprint(paths) {
		return nil, nil, fmt.Errorf("rotated while read")
	}
	for _, p := range paths {
		files = append(files, filepath.Base(p))
	}
	return files, clusterLogLines(records), nil
}

// clusterReadLogFile reads a CRI log file, decompressing a .gz one.
func clusterReadLogFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil || !strings.HasSuffix(path, ".gz") {
		return data, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if data, err = io.ReadAll(zr); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}

// clusterLogLine is one line of a container's output, put together from
// its CRI log records; partial when its last record was partial (P).
type clusterLogLine struct {
	text    string
	partial bool
}

// clusterLogLines puts the records of CRI log data ("TIME STREAM P|F TEXT")
// together into lines: a partial record continues in the next one. A last
// record not ended by a newline is being written, and left out.
func clusterLogLines(data []byte) []clusterLogLine {
	var lines []clusterLogLine
	var cur strings.Builder
	open := false
	whole := data[:bytes.LastIndexByte(data, '\n')+1]
	for _, rec := range strings.Split(string(whole), "\n") {
		f := strings.SplitN(rec, " ", 4)
		if len(f) < 3 {
			continue
		}
		text := ""
		if len(f) == 4 {
			text = f[3]
		}
		cur.WriteString(text)
		open = strings.HasPrefix(f[2], "P")
		if !open {
			lines = append(lines, clusterLogLine{text: cur.String()})
			cur.Reset()
		}
	}
	if open {
		lines = append(lines, clusterLogLine{text: cur.String(), partial: true})
	}
	return lines
}

// clusterLineNumbers are the N of the "line N ..." lines, less a first line
// whose beginning is in a file the kubelet removed and a last line not yet
// ended. Any other line must be whole.
func clusterLineNumbers(lines []clusterLogLine) ([]int, error) {
	var nums []int
	for i, l := range lines {
		if l.partial && i == len(lines)-1 {
			break
		}
		var n int
		if _, err := fmt.Sscanf(l.text, "line %d", &n); err != nil {
			if i == 0 {
				continue
			}
			return nil, fmt.Errorf("line %d of the log is %.60q: not a numbered line", i+1, l.text)
		}
		nums = append(nums, n)
	}
	return nums, nil
}

// TestClusterParallelImagePulls checks that the kubelet's pulls, side by
// side (serializeImagePulls: false), are minicri's side by side: pods of
// three images created at once all start, each on its own image, and the
// three pulls were under way together: a proxy in front of the cluster's
// registry holds the download of each image's own layer until all three
// are asked for (so pulls made one at a time fail the test, after a bound).
// The images share their bottom layer, which minicri fetches once.
func TestClusterParallelImagePulls(t *testing.T) {
	const n = 3
	env := clusterEnv(t)
	k := clusterKubectl{t: t, env: env}
	host := clusterHostNode(t, k, env)
	cfg := clusterKubeletConfig(t, k, host)
	if cfg["serializeImagePulls"] != false {
		t.Fatalf("the kubelet on %s pulls one image at a time (serializeImagePulls %v): hack/cluster.sh sets it false", host, cfg["serializeImagePulls"])
	}
	if m, ok := cfg["maxParallelImagePulls"].(float64); ok && m < n {
		t.Fatalf("the kubelet on %s pulls at most %v images at once; the test pulls %d", host, m, n)
	}
	ns := clusterNamespace(t, k, "minicri-pulls-")
	proxy := clusterHoldingProxy(t, env["REGISTRY"], time.Minute)
	var manifest strings.Builder
	digests := map[string]string{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("img%d", i)
		// Its own layer, of this run: an image the node has not got.
		own := testimage.Layer(t, testimage.File("which", name+" of "+ns+"\n", 0o644))
		d, err := own.Digest()
		if err != nil {
			t.Fatal(err)
		}
		proxy.hold(d.String())
		repo := "minicri-parallel/" + name + ":" + ns
		digests[name] = testimage.Push(t, testimage.Image(t, []v1.Layer{testimage.BusyboxLayer(t), own}), env["REGISTRY"]+"/"+repo)
		fmt.Fprintf(&manifest, `apiVersion: v1
kind: Pod
metadata: {name: %[1]s, namespace: %[2]s, labels: {app: parallel}}
spec:
  nodeName: %[3]s
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: %[4]s
    command: ["/bin/sh", "-c", "cat /which; exec sleep 3600"]
---
`, name, ns, host, proxy.host+"/"+repo)
	}
	k.must(manifest.String(), "apply", "-f", "-")
	k.waitOrDescribe(ns, "the pods of the three images to be Ready", "wait", "--for=condition=Ready", "pod", "-l", "app=parallel", "--timeout=300s")
	if !proxy.overlapped() {
		t.Errorf("the downloads of the images' own layers did not overlap: %s", proxy.report())
	}
	for name, digest := range digests {
		if got, want := strings.TrimSpace(k.must("", "-n", ns, "logs", name)), name+" of "+ns; got != want {
			t.Errorf("pod %s reads %q from its image's own layer, want %q", name, got, want)
		}
		if id := k.must("", "-n", ns, "get", "pod", name, "-o", "jsonpath={.status.containerStatuses[0].imageID}"); !strings.HasSuffix(id, "@"+digest) {
			t.Errorf("pod %s runs image %s, want the one pushed, %s", name, id, digest)
		}
	}
}

// clusterProxy is a registry proxy on 127.0.0.1 (which minicri reaches over
// plain HTTP, as it does the cluster's registry) that holds the GETs of some
// blobs until each of them has been asked for, or a bound has passed.
type clusterProxy struct {
	host  string
	bound time.Duration

	mu       sync.Mutex
	held     map[string]bool // digest → asked for yet
	all      chan struct{}   // closed once each held blob was asked for
	closed   bool
	timedOut []string // blobs whose GET waited out the bound, or was given up, alone
}

func clusterHoldingProxy(t *testing.T, registry string, bound time.Duration) *clusterProxy {
	t.Helper()
	target, err := url.Parse("http://" + registry)
	if err != nil {
		t.Fatal(err)
	}
	p := &clusterProxy{bound: bound, held: map[string]bool{}, all: make(chan struct{})}
	rp := httputil.NewSingleHostReverseProxy(target)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.host = l.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if i := strings.LastIndex(r.URL.Path, "/blobs/"); i >= 0 && r.Method == http.MethodGet {
			p.wait(r.Context(), r.URL.Path[i+len("/blobs/"):])
		}
		rp.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 30 * time.Second}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return p
}

// hold makes the proxy hold the GETs of blob digest.
func (p *clusterProxy) hold(digest string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held[digest] = false
}

func (p *clusterProxy) wait(ctx context.Context, digest string) {
	p.mu.Lock()
	asked, ok := p.held[digest]
	if !ok {
		p.mu.Unlock()
		return
	}
	if !asked {
		p.held[digest] = true
		done := true
		for _, a := range p.held {
			done = done && a
		}
		if done && !p.closed {
			p.closed = true
			close(p.all)
		}
	}
	p.mu.Unlock()
	select {
	case <-p.all:
	case <-ctx.Done():
		// The puller gave up waiting alone.
		p.mu.Lock()
		p.timedOut = append(p.timedOut, digest+" (cancelled)")
		p.mu.Unlock()
	case <-time.After(p.bound):
		p.mu.Lock()
		p.timedOut = append(p.timedOut, digest)
		// Pulls one at a time would each wait the bound: let the rest by.
		if !p.closed {
			p.closed = true
			close(p.all)
		}
		p.mu.Unlock()
	}
}

// overlapped: every held blob was asked for while the others were held.
func (p *clusterProxy) overlapped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.held {
		if !a {
			return false
		}
	}
	return len(p.timedOut) == 0
}

func (p *clusterProxy) report() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("blobs asked for %v; waited out the %v bound alone: %v", p.held, p.bound, p.timedOut)
}
