package oci

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestCRIUMissingIsNoCheckpoint(t *testing.T) {
	c := &CRIU{Path: filepath.Join(t.TempDir(), "criu"), ScratchDir: t.TempDir()}
	st := c.Check()
	if !errors.Is(st.Err, ErrNoCheckpoint) || !strings.Contains(st.Err.Error(), "criu not found") {
		t.Fatalf("Check with no criu: %v, want ErrNoCheckpoint saying criu is not found", st.Err)
	}
}

// A criu that cannot answer its version is no CRIU; it is asked once while
// it is the same file, and again once it changed (an upgrade).
func TestCRIUCheckIsKeptWhileTheBinaryIsTheSame(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	bin := filepath.Join(dir, "criu")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(bin, []byte("#!/bin/sh\necho x >>"+calls+"\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	countCalls := func() int {
		data, _ := os.ReadFile(calls)
		return strings.Count(string(data), "x")
	}
	write("exit 1")
	c := &CRIU{Path: bin, ScratchDir: filepath.Join(dir, "scratch")}
	for range 2 {
		st := c.Check()
		if !errors.Is(st.Err, ErrNoCheckpoint) || !strings.Contains(st.Err.Error(), "version") || st.Path != bin {
			t.Fatalf("Check of a criu that fails: %+v, want ErrNoCheckpoint about its version", st)
		}
	}
	if n := countCalls(); n != 1 {
		t.Fatalf("criu ran %d times for two checks, want once", n)
	}
	write("exit 2 # upgraded")
	c.Check()
	if n := countCalls(); n != 2 {
		t.Fatalf("criu ran %d times after it changed, want again", n)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "scratch")); len(entries) != 0 {
		t.Errorf("the probe left %v", entries)
	}
}

// This host's CRIU (if any) either works or says why not, with its version;
// the probe leaves nothing in its scratch dir and no process behind.
func TestCRIUOfThisHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("CRIU dumps need root")
	}
	if _, err := exec.LookPath("criu"); err != nil {
		t.Skip("no criu here")
	}
	scratch := t.TempDir()
	st := (&CRIU{ScratchDir: scratch}).Check()
	t.Logf("CRIU %s at %s: %v", st.VersionString(), st.Path, st.Err)
	if st.Version == 0 {
		t.Errorf("no version: %v", st.Err)
	}
	if st.Err != nil && (!errors.Is(st.Err, ErrNoCheckpoint) || !strings.Contains(st.Err.Error(), st.VersionString())) {
		t.Errorf("error %v: want ErrNoCheckpoint naming version %s", st.Err, st.VersionString())
	}
	if entries, _ := os.ReadDir(scratch); len(entries) != 0 {
		t.Errorf("the probe left %v", entries)
	}
}

func TestCRIUVersionString(t *testing.T) {
	for v, want := range map[int]string{31701: "3.17.1", 40100: "4.1", 31600: "3.16", 0: ""} {
		if got := (CRIUStatus{Version: v}).VersionString(); got != want {
			t.Errorf("VersionString(%d) = %q, want %q", v, got, want)
		}
	}
}
