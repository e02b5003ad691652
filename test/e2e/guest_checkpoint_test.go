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

	metadata "github.com/checkpoint-restore/checkpointctl/lib"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/testimage"
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
	g.needsCRIU(t, d)
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
	g.waitFor(t, "the counter to reach 3", g.Timeout(30*time.Second), func() bool {
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
	g.waitFor(t, "the checkpointed container to count on", g.Timeout(30*time.Second), func() bool {
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
	g.waitFor(t, "the restored counter to count on", g.Timeout(30*time.Second), func() bool {
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

// TestGuestCheckpointRootfsOfAnAttackersContainer checkpoints, through
// CheckpointContainer on a node where CRIU works, a container whose image
// ships /h, a link to a directory of the node holding other pods' names,
// and which deletes /h, makes a directory there and writes a sparse file
// of 1 GiB holding one block. The archive's rootfs-diff.tar and its
// deleted.files name nothing of the node's directory, and the archive is
// some MiB: the sparse file is stored sparse, and reads back whole. With
// runtime.checkpoint_max_bytes below what the container holds, the call is
// ResourceExhausted and leaves neither an archive nor its staging behind.
func TestGuestCheckpointRootfsOfAnAttackersContainer(t *testing.T) {
	g, d := guestTest(t)
	g.needsCRIU(t, d)
	secrets := "/var/lib/guest-secret-" + randomHex(4)
	names := []string{"other-pods-volume", "other-pods-secret"}
	g.Run(t, fmt.Sprintf("mkdir -p %[1]s && touch %[1]s/%s %[1]s/%s", secrets, names[0], names[1]))
	t.Cleanup(func() { g.Run(t, "rm -rf "+shellQuote(secrets)) })

	const ref = "docker.io/minicri-e2e/linked:guest"
	img := testimage.Image(t, []v1.Layer{testimage.BusyboxLayer(t), testimage.Layer(t, testimage.Symlink("h", secrets))})
	save := filepath.Join(g.Share, "linked-"+randomHex(4)+".tar")
	testimage.WriteDockerSave(t, save, map[string]v1.Image{ref: img})
	defer os.Remove(save)
	g.Run(t, "minicri image import "+shellQuote(g.guestPath(save)))
	t.Cleanup(func() { // after the pod's, registered below
		_ = d.Images.RemoveImage(context.Background(), &runtime.ImageSpec{Image: ref})
	})

	p := g.runPod(t, d, guestPodConfig("attacker"))
	// Two MiB of noise: more than the limit set below, whatever CRIU's
	// images of the shell come to.
	id := g.startIn(t, d, p, containerConfig("attacker", ref, "sh", "-c",
		"rm /h && mkdir /h && echo mine > /h/mine && dd if=/dev/zero of=/big bs=4096 count=1 seek=262143 2>/dev/null && "+
			"head -c 2097152 /dev/urandom > /noise && echo ready > /tmp/ready; sleep 3600"))
	g.waitFor(t, "the container to plant its files", g.Timeout(30*time.Second), func() bool {
		out, _, _ := g.execSync(t, d, id, "cat", "/tmp/ready")
		return strings.TrimSpace(out) == "ready"
	})
	if ls := g.Run(t, "ls "+shellQuote(secrets)); !strings.Contains(ls, names[0]) {
		t.Fatalf("the node's directory lost its names to the container: %q", ls)
	}

	archive := "/var/tmp/attacker-" + randomHex(4) + ".tar"
	t.Cleanup(func() { g.Run(t, "rm -f "+shellQuote(archive)) })
	checkpoint := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), g.Timeout(2*time.Minute))
		defer cancel()
		return d.Runtime.CheckpointContainer(ctx, &runtime.CheckpointContainerRequest{
			ContainerId: id, Location: archive, Timeout: int64(g.Timeout(time.Minute).Seconds())})
	}
	if err := checkpoint(); err != nil {
		t.Fatalf("CheckpointContainer: %v", err)
	}
	size, err := strconv.ParseInt(strings.TrimSpace(g.Run(t, "stat -c %s "+shellQuote(archive))), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the archive is %d bytes", size)
	if size > 64<<20 {
		t.Errorf("the archive is %d bytes for a container that wrote 2 MiB and a sparse file of 1 GiB", size)
	}

	hostCopy := filepath.Join(g.Share, "attacker-"+randomHex(4)+".tar")
	g.Run(t, fmt.Sprintf("cp %s %s", shellQuote(archive), shellQuote(g.guestPath(hostCopy))))
	defer os.Remove(hostCopy)
	a := readCheckpointArchive(t, hostCopy)
	for _, name := range a.Deleted {
		if strings.Contains(name, "other-pods") {
			t.Errorf("deleted.files lists %s, an entry of the node's directory the image's link names (all: %v)", name, a.Deleted)
		}
	}
	found := rootfsDiffSizes(t, filepath.Join(a.Dir, metadata.RootFsDiffTar))
	for name := range found {
		if strings.Contains(name, "other-pods") {
			t.Errorf("rootfs-diff.tar holds %s", name)
		}
	}
	if found["big"] != 1<<30 || found["h/mine"] != 5 || found["noise"] != 2<<20 {
		t.Errorf("rootfs-diff.tar entries %v, want big of 1 GiB (read back whole), h/mine and noise", found)
	}

	// The limit below what the container holds: restart the daemon with
	// it, and with the shipped config again when the test ends.
	conf := "/etc/minicri/minicri.toml"
	g.Run(t, fmt.Sprintf("cp %[1]s %[1]s.orig && sed -i 's/^checkpoint_max_bytes = .*/checkpoint_max_bytes = 1048576/' %[1]s && grep -q '^checkpoint_max_bytes = 1048576$' %[1]s", conf))
	t.Cleanup(func() {
		g.Run(t, fmt.Sprintf("mv %[1]s.orig %[1]s && systemctl restart minicri.service", conf))
		g.waitFor(t, "the daemon restarted with the shipped config to answer", g.Timeout(20*time.Second), func() bool {
			_, err := d.Runtime.Version(context.Background(), "")
			return err == nil
		})
	})
	g.Run(t, "systemctl restart minicri.service && rm -f "+shellQuote(archive))
	g.waitFor(t, "the restarted daemon to answer", g.Timeout(20*time.Second), func() bool {
		_, err := d.Runtime.ContainerStatus(context.Background(), id, false)
		return err == nil
	})
	err = checkpoint()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(fmt.Sprint(err), "checkpoint_max_bytes") {
		t.Errorf("CheckpointContainer past runtime.checkpoint_max_bytes: %v, want ResourceExhausted naming the key", err)
	}
	if left := g.Run(t, fmt.Sprintf("ls -d %s /var/lib/minicri/%s/%s 2>/dev/null || true", shellQuote(archive), "checkpoints", id)); strings.TrimSpace(left) != "" {
		t.Errorf("a checkpoint past the limit left behind: %s", left)
	}
}
