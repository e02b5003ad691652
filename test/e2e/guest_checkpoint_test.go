//go:build e2e && guest

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// guestCounter counts, one a second, into /tmp/count.log and stdout: the
// value after a restore tells whether the process went on where it was.
const guestCounter = `i=0; while true; do i=$((i+1)); echo $i >>/tmp/count.log; echo $i; sleep 1; done`

// TestGuestCheckpointRestore checkpoints a running container of a static
// pod through the kubelet's checkpoint API (ContainerCheckpoint, beta and
// on by default) on a node where CRIU works, reads the archive as
// checkpointctl does, then restores it with runc restore beside the
// original and sees the process go on counting from where it was
// checkpointed, in a root filesystem made from the archive's rootfs diff.
func TestGuestCheckpointRestore(t *testing.T) {
	g := bootedGuest(t)
	g.LogJournalOnFailure(t)
	d := g.CRI(t)
	g.startKubelet(t, d)

	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: counter
  namespace: default
spec:
  containers:
  - name: counter
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", %q]
`, guestBusyboxRef, guestCounter)
	g.WriteFile(t, "/etc/kubernetes/manifests/counter.yaml", []byte(manifest), 0o644)
	pod := g.waitKubeletPod(t, "counter", "Running", g.Timeout(90*time.Second), running)
	ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(time.Minute))
	defer cancel()
	cs, err := d.Runtime.ListContainers(ctx, &runtime.ContainerFilter{
		State:         &runtime.ContainerStateValue{State: runtime.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(pod.UID)}})
	if err != nil || len(cs) != 1 {
		t.Fatalf("the static pod's running container in minicri: %v %v", cs, err)
	}
	id := cs[0].GetId()
	waitFor(t, "the counter to reach 3", g.Timeout(30*time.Second), func() bool {
		out, _, _ := g.execSync(t, d, id, "cat", "/tmp/count.log")
		return len(strings.Fields(out)) >= 3
	})

	// The kubelet's checkpoint API: the archive's path comes back in items.
	start := time.Now()
	out := g.Run(t, fmt.Sprintf("curl -sk --max-time %d -X POST 'https://127.0.0.1:10250/checkpoint/default/%s/counter?timeout=%d'",
		int(g.Timeout(time.Minute).Seconds()), pod.Name, int(g.Timeout(30*time.Second).Seconds())))
	took := time.Since(start)
	var answer struct{ Items []string }
	if err := json.Unmarshal([]byte(out), &answer); err != nil || len(answer.Items) != 1 {
		t.Fatalf("kubelet checkpoint API answered %q (%v), want one archive", out, err)
	}
	archive := answer.Items[0]
	t.Logf("checkpoint through the kubelet took %s: %s", took.Round(time.Millisecond), archive)
	t.Cleanup(func() { g.Run(t, "rm -f "+shellQuote(archive)) })
	if mode := strings.TrimSpace(g.Run(t, "stat -c %a "+shellQuote(archive))); mode != "600" {
		t.Errorf("archive mode %s, want 600: it holds the container's memory", mode)
	}

	// Read it on the host, as checkpointctl reads it.
	hostCopy := filepath.Join(g.Share, "checkpoint-"+randomHex(4)+".tar")
	g.Run(t, fmt.Sprintf("cp %s %s", shellQuote(archive), shellQuote(g.guestPath(hostCopy))))
	a := readCheckpointArchive(t, hostCopy)
	if a.Config.ID != id || a.Config.Name != "counter" || a.Config.RootfsImageName != guestBusyboxRef || a.Config.OCIRuntime == "" {
		t.Errorf("config.dump = %+v", a.Config)
	}
	for k, want := range map[string]string{"io.kubernetes.cri.container-name": "counter", "io.kubernetes.cri.sandbox-name": pod.Name, "io.kubernetes.cri.sandbox-namespace": "default"} {
		if got := a.Spec.Annotations[k]; got != want {
			t.Errorf("spec.dump annotation %s = %q, want %q (checkpointctl shows it)", k, got, want)
		}
	}
	checkpointctlReads(t, hostCopy, "counter")
	counted := strings.Fields(a.rootfsDiffFiles(t)["tmp/count.log"])
	if len(counted) < 3 {
		t.Fatalf("rootfs-diff.tar's tmp/count.log = %v, want the counter's values", counted)
	}
	last, _ := strconv.Atoi(counted[len(counted)-1])

	// The original goes on: checkpoints leave the container running.
	waitFor(t, "the checkpointed container to count on", g.Timeout(30*time.Second), func() bool {
		out, _, _ := g.execSync(t, d, id, "cat", "/tmp/count.log")
		return len(strings.Fields(out)) > len(counted)
	})

	// Restore with runc beside the original: a root filesystem copied from
	// the original's and given the archive's rootfs diff (its count.log as
	// at the checkpoint), the archive's spec in a cgroup of its own, the
	// pod's namespaces joined as at the dump.
	g.Run(t, restoreScript(archive))
	t.Cleanup(func() {
		g.Run(t, `runc --root /run/restore-test delete -f restored 2>/dev/null || true
rmdir /sys/fs/cgroup/minicri-restore-test 2>/dev/null || true
rm -rf /var/tmp/restore-test /run/restore-test`)
	})
	state := g.Run(t, "runc --root /run/restore-test state restored")
	if !strings.Contains(state, `"status": "running"`) {
		t.Fatalf("runc state of the restored container: %s", state)
	}
	var values []string
	waitFor(t, "the restored counter to count on", g.Timeout(30*time.Second), func() bool {
		values = strings.Fields(g.Run(t, "cat /var/tmp/restore-test/rootfs/tmp/count.log"))
		return len(values) >= len(counted)+2
	})
	for i, v := range values {
		if v != strconv.Itoa(i+1) {
			t.Fatalf("the restored counter wrote %v: value %d is %s, want %d (it went on from %d, not where it was)", values, i+1, v, i+1, last)
		}
	}
	// Its stdout (runc's, inherited for the monitor's pipe) goes on too,
	// never again from a value before the checkpoint.
	printed := strings.Fields(g.Run(t, "cat /var/tmp/restore-test/out.log"))
	for i, v := range printed {
		n, err := strconv.Atoi(v)
		if err != nil || n <= last || (i > 0 && printed[i-1] != strconv.Itoa(n-1)) {
			t.Fatalf("the restored process printed %v: want consecutive values after the checkpointed %d", printed, last)
		}
	}
	t.Logf("checkpointed at %d; the restored counter wrote up to %s, printed %d values", last, values[len(values)-1], len(printed))
}

// restoreScript restores the archive's container as "restored" in the
// guest with runc: the archive unpacked in /var/tmp/restore-test, a root
// filesystem made from the original's with the archive's rootfs diff
// applied (unpacked, then deleted.files removed), and the archive's spec
// with that root and a cgroup of its own.
func restoreScript(archive string) string {
	return `set -e
R=/var/tmp/restore-test
rm -rf $R && mkdir -p $R/archive $R/work
tar -xf ` + shellQuote(archive) + ` -C $R/archive
cp -a "$(jq -r .root.path $R/archive/spec.dump)" $R/rootfs
rm -f $R/rootfs/tmp/count.log
tar -xf $R/archive/rootfs-diff.tar -C $R/rootfs
if [ -f $R/archive/deleted.files ]; then
	jq -r '.[]' $R/archive/deleted.files | while read -r p; do rm -rf "$R/rootfs$p"; done
fi
jq --arg root $R/rootfs '.root.path = $root | .root.readonly = false | .linux.cgroupsPath = "/minicri-restore-test"' \
	$R/archive/spec.dump >$R/config.json
if ! runc --root /run/restore-test restore -d --image-path $R/archive/checkpoint --work-path $R/work \
	--bundle $R restored </dev/null >$R/out.log 2>$R/runc.err; then
	echo "runc restore failed:"; cat $R/runc.err; grep -E 'Error|Warn' $R/work/restore.log | tail -20; exit 1
fi`
}

// checkpointctlEnv names a checkpointctl binary (built from the module
// proxy: GOBIN=DIR go install github.com/checkpoint-restore/checkpointctl@v1.6.0)
// that, when set, reads the guest's archive too: show, and the process tree
// from CRIU's images. Unset, the archive is read with checkpointctl's lib
// alone (readCheckpointArchive), and the log says so.
const checkpointctlEnv = "MINICRI_CHECKPOINTCTL"

func checkpointctlReads(t *testing.T, archive, container string) {
	t.Helper()
	bin := os.Getenv(checkpointctlEnv)
	if bin == "" {
		t.Logf("%s unset: the archive was read with checkpointctl's lib only", checkpointctlEnv)
		return
	}
	show, err := exec.Command(bin, "show", archive).CombinedOutput()
	if err != nil || !strings.Contains(string(show), container) || !strings.Contains(string(show), guestBusyboxRef) {
		t.Errorf("checkpointctl show: %v\n%s\nwant the container %s and its image", err, show, container)
	}
	tree, err := exec.Command(bin, "inspect", "--ps-tree-cmd", archive).CombinedOutput()
	if err != nil || !strings.Contains(string(tree), "Process tree") || !strings.Contains(string(tree), "[1]") || !strings.Contains(string(tree), "Memory pages size") {
		t.Errorf("checkpointctl inspect --ps-tree-cmd: %v\n%s\nwant the process tree and memory pages read from CRIU's images", err, tree)
	}
	t.Logf("checkpointctl show:\n%s\ncheckpointctl inspect --ps-tree-cmd:\n%s", show, tree)
}
