package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minicri/minicri/server/internal/lifecycle"
	"github.com/minicri/minicri/store"
)

// Records as the version before typed states wrote them: a restarted daemon
// of this version must load them unchanged, and write the states the same.
const (
	oldSandboxRecord = `{"ID":"aaaa","Name":"\"web\"/\"ns\"/\"uid\"/0","Metadata":{"Name":"web","Namespace":"ns","UID":"uid","Attempt":0},` +
		`"Labels":null,"Annotations":null,"Handler":"runc","CreatedAt":1,"State":"notready","Dir":"/run/minicri/pods/aaaa",` +
		`"Namespaces":{"Dir":"","Net":"","IPC":"","UTS":""},"NetworkUp":false,"IPs":null,"ShmMounted":false,"Infra":{"PID":0,"StartTime":0},"Config":null}`
	oldContainerRecord = `{"ID":"bbbb","Name":"aaaa/\"app\"/0","SandboxID":"aaaa","Metadata":{"Name":"app","Attempt":0},"Labels":null,` +
		`"Annotations":null,"Image":"busybox","ImageID":"sha256:1","ImageRef":"sha256:1","CreatedAt":1,"StartedAt":2,"FinishedAt":3,` +
		`"State":"exited","ExitCode":3,"Reason":"Error","Message":"","LogPath":"","Bundle":"/run/minicri/containers/bbbb","Handler":"runc",` +
		`"CgroupsPath":"","StopSignal":"SIGTERM","Monitor":{"PID":7,"StartTime":8},"Config":null}`
)

func TestRecordsOfThePreviousVersionLoad(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"sandboxes/aaaa.json": oldSandboxRecord, "containers/bbbb.json": oldContainerRecord} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sandboxes, corrupt, err := store.Open[lifecycle.SandboxRecord](filepath.Join(dir, "sandboxes"), newSandbox)
	if err != nil || len(corrupt) > 0 {
		t.Fatalf("open sandboxes: %v, corrupt %v", err, corrupt)
	}
	sb, err := sandboxes.Get("aaaa")
	if err != nil || sb.State != lifecycle.StateNotReady || sb.Handler != "runc" {
		t.Fatalf("old sandbox record = %+v, %v; want state %s", sb, err, lifecycle.StateNotReady)
	}
	containers, corrupt, err := store.Open[lifecycle.ContainerRecord](filepath.Join(dir, "containers"), newContainer)
	if err != nil || len(corrupt) > 0 {
		t.Fatalf("open containers: %v, corrupt %v", err, corrupt)
	}
	c, err := containers.Get("bbbb")
	if err != nil || c.State != lifecycle.StateExited || c.ExitCode != 3 || c.Monitor.PID != 7 {
		t.Fatalf("old container record = %+v, %v; want state %s, exit code 3, monitor 7", c, err, lifecycle.StateExited)
	}

	// Written back, the records are byte for byte what the old version wrote.
	if err := sandboxes.Put(sb.ID, sb); err != nil {
		t.Fatal(err)
	}
	if err := containers.Put(c.ID, c); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"sandboxes/aaaa.json": oldSandboxRecord, "containers/bbbb.json": oldContainerRecord} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(got)) != want {
			t.Errorf("%s written back:\n%s\nwant:\n%s", name, got, want)
		}
	}
}

func TestRecordStatesPrint(t *testing.T) {
	for _, c := range []struct {
		state interface{ String() string }
		want  string
	}{
		{lifecycle.SandboxRecordState(lifecycle.StateCreating), "creating"}, {lifecycle.StateReady, "ready"}, {lifecycle.StateNotReady, "notready"},
		{lifecycle.ContainerRecordState(lifecycle.StateCreating), "creating"}, {lifecycle.StateCreated, "created"}, {lifecycle.StateRunning, "running"}, {lifecycle.StateExited, "exited"},
	} {
		if got := c.state.String(); got != c.want {
			t.Errorf("state prints %q, want %q (the on-disk value)", got, c.want)
		}
	}
}
