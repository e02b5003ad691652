package oci

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestKillStrandedInits: a process that holds a container's exec fifo under
// the runtime root open, as a stranded `runc init` does, is found by that
// fifo and killed, also once the runtime's delete removed the fifo; one of
// a container the caller keeps is left alone.
func TestKillStrandedInits(t *testing.T) {
	root := t.TempDir()
	hold := func(id string) *exec.Cmd {
		t.Helper()
		dir := filepath.Join(root, id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		fifo := filepath.Join(dir, execFifo)
		if err := unix.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		// O_PATH, as runc hands it to its init.
		f, err := os.OpenFile(fifo, unix.O_PATH, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd := exec.Command("sleep", "60")
		cmd.ExtraFiles = []*os.File{f}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	stranded, kept := hold("stranded"), hold("kept")
	// The runtime's delete --force of a container it does not know
	// removes the state dir, fifo and all.
	if err := os.RemoveAll(filepath.Join(root, "stranded")); err != nil {
		t.Fatal(err)
	}
	found := WaitingInits(root)
	if !slices.Equal(found["stranded"], []int{stranded.Process.Pid}) || !slices.Equal(found["kept"], []int{kept.Process.Pid}) {
		t.Fatalf("WaitingInits = %v, want stranded %d and kept %d", found, stranded.Process.Pid, kept.Process.Pid)
	}
	killed, err := KillStrandedInits(root, func(id string) bool { return id == "kept" })
	if err != nil || !slices.Equal(killed, []string{"stranded"}) {
		t.Fatalf("KillStrandedInits = %v, %v; want [stranded]", killed, err)
	}
	done := make(chan error, 1)
	go func() { done <- stranded.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stranded init still runs")
	}
	if err := kept.Process.Signal(unix.Signal(0)); err != nil {
		t.Errorf("the init of a kept container was killed: %v", err)
	}
}
