package server

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/internal/fake"
)

// fakeCRIU answers what a test says of CRIU.
type fakeCRIU struct{ st oci.CRIUStatus }

func (c *fakeCRIU) Check() oci.CRIUStatus { return c.st }

// workingCRIU is what newTestServer's CRIU says: Debian 12's, working.
func workingCRIU() *fakeCRIU {
	return &fakeCRIU{st: oci.CRIUStatus{Path: "/usr/sbin/criu", Version: 31701}}
}

func checkpointReq(id, location string) *runtime.CheckpointContainerRequest {
	return &runtime.CheckpointContainerRequest{ContainerId: id, Location: location}
}

// archiveOf reads a checkpoint archive: each entry's content by name.
func archiveOf(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[hdr.Name] = body
	}
}

func TestCheckpointContainerWritesTheArchiveLayout(t *testing.T) {
	ts := newTestServer(t)
	podID, id := ts.runningCtr(t, "cp")
	location := filepath.Join(t.TempDir(), "checkpoint-cp.tar")
	if _, err := ts.CheckpointContainer(bg, checkpointReq(id[:12], location)); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(location)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("archive: %v, mode %v; want a 0600 file (it holds the container's memory)", err, fi.Mode())
	}
	files := archiveOf(t, location)
	for _, name := range []string{"checkpoint/", "checkpoint/pages-1.img", "dump.log", "config.dump", "spec.dump", "status.dump", "rootfs-diff.tar", "deleted.files"} {
		if _, ok := files[name]; !ok {
			t.Errorf("archive lacks %s (has %v)", name, keys(files))
		}
	}
	var cfg oci.CheckpointConfig
	if err := json.Unmarshal(files["config.dump"], &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.ID != id || cfg.Name != "app" || cfg.RootfsImageName != "docker.io/library/busybox:latest" || cfg.OCIRuntime != "runc" ||
		cfg.CreatedTime.IsZero() || cfg.CheckpointedAt.Before(cfg.CreatedTime) {
		t.Errorf("config.dump = %+v", cfg)
	}
	var spec specs.Spec
	if err := json.Unmarshal(files["spec.dump"], &spec); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{annContainerName: "app", annSandboxName: "cp", annSandboxNamespace: "default", annSandboxID: podID} {
		if got := spec.Annotations[k]; got != want {
			t.Errorf("spec.dump annotation %s = %q, want %q (checkpointctl reads it)", k, got, want)
		}
	}
	if spec.Process == nil || len(spec.Process.Args) == 0 || spec.Process.Args[0] != "sleep" {
		t.Errorf("spec.dump is not the container's spec: process %+v", spec.Process)
	}
	var deleted []string
	if err := json.Unmarshal(files["deleted.files"], &deleted); err != nil || len(deleted) != 1 || deleted[0] != "/gone" {
		t.Errorf("deleted.files = %s (%v), want [\"/gone\"]", files["deleted.files"], err)
	}
	var st runtime.ContainerStatus
	if err := json.Unmarshal(files["status.dump"], &st); err != nil || st.Id != id || st.State != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("status.dump = %s (%v)", files["status.dump"], err)
	}
	if ts.runc.Paused(id) {
		t.Error("the container is left paused")
	}
	wantNoStage(t, ts)
	if got := ts.ctrState(t, id); got != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container state after its checkpoint = %v, want RUNNING", got)
	}
}

func TestCheckpointContainerRefusesBadRequests(t *testing.T) {
	ts := newTestServer(t)
	_, id := ts.runningCtr(t, "cp")
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		req  *runtime.CheckpointContainerRequest
		code codes.Code
		says []string
	}{
		{"no location", checkpointReq(id, ""), codes.InvalidArgument, []string{"location", "required"}},
		{"relative location", checkpointReq(id, "cp.tar"), codes.InvalidArgument, []string{"location", "absolute"}},
		{"no such directory", checkpointReq(id, filepath.Join(dir, "none", "cp.tar")), codes.InvalidArgument, []string{"location", "does not exist"}},
		{"a directory", checkpointReq(id, dir), codes.InvalidArgument, []string{"location", "directory"}},
		{"negative timeout", &runtime.CheckpointContainerRequest{ContainerId: id, Location: filepath.Join(dir, "a.tar"), Timeout: -1}, codes.InvalidArgument, []string{"timeout"}},
		{"no container ID", checkpointReq("", filepath.Join(dir, "a.tar")), codes.InvalidArgument, []string{"container_id"}},
		{"unknown container", checkpointReq("0123456789ab", filepath.Join(dir, "a.tar")), codes.NotFound, nil},
	} {
		_, err := ts.CheckpointContainer(bg, tc.req)
		wantCode(t, tc.name, err, tc.code, tc.says...)
	}
	wantNoArchive(t, dir)
	wantNoStage(t, ts)
}

func TestCheckpointOfAContainerNotRunningIsFailedPrecondition(t *testing.T) {
	ts := newTestServer(t)
	pod := podConfig("cp")
	podID := ts.runPod(t, pod)
	id := ts.createCtr(t, podID, pod, ctrConfig("app"))
	dir := t.TempDir()
	_, err := ts.CheckpointContainer(bg, checkpointReq(id, filepath.Join(dir, "cp.tar")))
	wantCode(t, "created container", err, codes.FailedPrecondition, id, "created", "running")
	wantNoArchive(t, dir)
}

// On a node whose CRIU does not work (this host: Debian's 3.17 on 6.18),
// the kubelet gets a reason an operator can act on, and nothing is made.
func TestCheckpointWithoutWorkingCRIUIsFailedPrecondition(t *testing.T) {
	ts := newTestServer(t)
	_, id := ts.runningCtr(t, "cp")
	ts.criu = &fakeCRIU{st: oci.CRIUStatus{Path: "/usr/sbin/criu", Version: 31701,
		Err: fmt.Errorf("%w: /usr/sbin/criu (CRIU 3.17.1) cannot dump a process on this kernel: vdso", oci.ErrNoCheckpoint)}}
	dir := t.TempDir()
	_, err := ts.CheckpointContainer(bg, checkpointReq(id, filepath.Join(dir, "cp.tar")))
	wantCode(t, "broken CRIU", err, codes.FailedPrecondition, "CRIU", "3.17.1", id)
	if ts.runc.Paused(id) {
		t.Error("the container was paused for a checkpoint that could not run")
	}
	wantNoArchive(t, dir)
	wantNoStage(t, ts)

	resp, err := ts.Status(bg, &runtime.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info checkpointInfo
	if err := json.Unmarshal([]byte(resp.GetInfo()["checkpoint"]), &info); err != nil {
		t.Fatalf("Status info checkpoint = %q: %v", resp.GetInfo()["checkpoint"], err)
	}
	if info.Available || info.CRIUVersion != "3.17.1" || !strings.Contains(info.Reason, "cannot dump") {
		t.Errorf("Status info checkpoint = %+v, want unavailable with CRIU 3.17.1 and the reason", info)
	}
}

// A failed or timed-out dump thaws the container and leaves no archive
// and no staging dir.
func TestFailedCheckpointLeavesNothingAndResumes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		arrange func(*fake.Runtime)
		req     func(id, loc string) *runtime.CheckpointContainerRequest
		code    codes.Code
	}{
		{"CRIU fails", func(r *fake.Runtime) { r.Fail("Checkpoint", errors.New("criu failed: type NOTIFY errno 0")) },
			checkpointReq, codes.Internal},
		{"timeout passes", func(r *fake.Runtime) { r.CheckpointBlocks = true },
			func(id, loc string) *runtime.CheckpointContainerRequest {
				return &runtime.CheckpointContainerRequest{ContainerId: id, Location: loc, Timeout: 1}
			}, codes.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t)
			_, id := ts.runningCtr(t, "cp")
			tc.arrange(ts.runc)
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(bg, 30*time.Second)
			defer cancel()
			_, err := ts.CheckpointContainer(ctx, tc.req(id, filepath.Join(dir, "cp.tar")))
			wantCode(t, tc.name, err, tc.code, id)
			if ts.runc.Paused(id) {
				t.Error("the container is left paused")
			}
			wantNoArchive(t, dir)
			wantNoStage(t, ts)
		})
	}
}

func TestStartSweepsCheckpointStages(t *testing.T) {
	ts := newTestServer(t)
	left := filepath.Join(ts.cfg.Root, checkpointsDir, "0123abcd")
	if err := os.MkdirAll(filepath.Join(left, "checkpoint"), 0o700); err != nil {
		t.Fatal(err)
	}
	ts.sweepCheckpointStages()
	wantNoStage(t, ts)
}

func wantNoArchive(t *testing.T, dir string) {
	t.Helper()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the location's directory holds %v after a failed checkpoint", entries)
	}
}

func wantNoStage(t *testing.T, ts *testServer) {
	t.Helper()
	if entries, _ := os.ReadDir(filepath.Join(ts.cfg.Root, checkpointsDir)); len(entries) != 0 {
		t.Errorf("staging dirs left: %v", entries)
	}
}

func keys(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A checkpoint that would pass runtime.checkpoint_max_bytes, by its
// memory (CRIU's pages) or by its staged rootfs diff, is ResourceExhausted
// naming the key, thaws the container and leaves no archive, no part of one
// and no staging dir.
func TestCheckpointPastItsBoundLeavesNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		arrange func(*testServer)
	}{
		{"memory", func(ts *testServer) { ts.runc.CheckpointPages = 2 << 20 }},
		{"rootfs diff", func(ts *testServer) { ts.images.DiffBytes = 2 << 20 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t)
			ts.cfg.Runtime.CheckpointMaxBytes = 1 << 20
			_, id := ts.runningCtr(t, "cp")
			tc.arrange(ts)
			dir := t.TempDir()
			_, err := ts.CheckpointContainer(bg, checkpointReq(id, filepath.Join(dir, "cp.tar")))
			wantCode(t, tc.name, err, codes.ResourceExhausted, "checkpoint_max_bytes", id)
			if ts.runc.Paused(id) {
				t.Error("the container is left paused")
			}
			wantNoArchive(t, dir)
			wantNoStage(t, ts)
		})
	}
	ts := newTestServer(t)
	ts.cfg.Runtime.CheckpointMaxBytes = 1 << 20
	_, id := ts.runningCtr(t, "cp")
	if _, err := ts.CheckpointContainer(bg, checkpointReq(id, filepath.Join(t.TempDir(), "cp.tar"))); err != nil {
		t.Fatalf("a checkpoint within its bound: %v", err)
	}
}
