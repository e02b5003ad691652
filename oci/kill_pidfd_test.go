package oci

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKillByPidfd: signals reach the init by its pidfd, not by runc kill,
// and a SIGKILL to every process of a container with its own PID namespace
// leaves none of them.
func TestKillByPidfd(t *testing.T) {
	forEachRunc(t, func(t *testing.T, ctx context.Context, rt *Runtime) {
		c := baseSpec(t, "/bin/sh", "-c", `trap "exit 3" TERM; sleep 60 & wait`)
		tc := createContainer(t, rt, c)
		if err := rt.Start(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
		waitForChildren(t, tc.pid, 1)
		if err := rt.killByPidfd(ctx, c.ID, syscall.SIGTERM, false); err != nil {
			t.Fatalf("SIGTERM by pidfd: %v, want it sent", err)
		}
		if code, err := tc.wait(5 * time.Second); err != nil || code != 3 {
			t.Fatalf("exit = %d, %v; want 3 from the TERM trap", code, err)
		}
		tc.pid = 0

		c2 := baseSpec(t, "/bin/sh", "-c", "sleep 60 & sleep 61 & wait")
		tc2 := createContainer(t, rt, c2)
		if err := rt.Start(ctx, c2.ID); err != nil {
			t.Fatal(err)
		}
		waitForChildren(t, tc2.pid, 2)
		procs := cgroupProcsFile(c2.CgroupParent, c2.ID)
		if data, err := os.ReadFile(procs); err != nil || len(strings.Fields(string(data))) < 3 {
			t.Fatalf("%s before the kill: %q, %v; want the shell and its two sleeps", procs, data, err)
		}
		if err := rt.killByPidfd(ctx, c2.ID, syscall.SIGKILL, true); err != nil {
			t.Fatalf("SIGKILL to all by pidfd: %v, want it sent", err)
		}
		if code, err := tc2.wait(5 * time.Second); err != nil || code != 128+int(syscall.SIGKILL) {
			t.Fatalf("exit = %d, %v; want killed", code, err)
		}
		tc2.pid = 0
		waitForEmptyCgroup(t, procs)
		// The init is gone: a kill is runc's to answer.
		if err := rt.killByPidfd(ctx, c2.ID, syscall.SIGKILL, true); !errors.Is(err, errNoPidfdKill) {
			t.Fatalf("kill of a dead init = %v, want errNoPidfdKill", err)
		}
	})
}

// TestKillByPidfdDefersToRuntime: every process of a container that shares
// a PID namespace, or a signal other than SIGKILL to all of them, is runc
// kill's to send.
func TestKillByPidfdDefersToRuntime(t *testing.T) {
	rt, ctx := debianRunc(t)
	c := baseSpec(t, "/bin/sleep", "60")
	c.Namespaces.PID = Namespace{Mode: NamespaceHost}
	createContainer(t, rt, c)
	if err := rt.killByPidfd(ctx, c.ID, syscall.SIGKILL, true); !errors.Is(err, errNoPidfdKill) {
		t.Fatalf("SIGKILL to all in the host's PID namespace = %v, want errNoPidfdKill", err)
	}
	own := baseSpec(t, "/bin/sleep", "60")
	createContainer(t, rt, own)
	if err := rt.killByPidfd(ctx, own.ID, syscall.SIGTERM, true); !errors.Is(err, errNoPidfdKill) {
		t.Fatalf("SIGTERM to all = %v, want errNoPidfdKill", err)
	}
	if err := (&Runtime{Path: rt.Path}).killByPidfd(ctx, own.ID, syscall.SIGKILL, false); !errors.Is(err, errNoPidfdKill) {
		t.Fatalf("kill with no root = %v, want errNoPidfdKill", err)
	}
}

func TestOwnsPIDNamespace(t *testing.T) {
	type ns = struct {
		Type string `json:"type"`
		Path string `json:"path"`
	}
	tests := []struct {
		name string
		nss  []ns
		want bool
	}{
		{"new", []ns{{Type: "NEWNET", Path: "/run/netns/x"}, {Type: "NEWPID"}}, true},
		{"joined", []ns{{Type: "NEWPID", Path: "/proc/42/ns/pid"}}, false},
		{"the host's", []ns{{Type: "NEWNET"}}, false},
	}
	for _, tc := range tests {
		var st runcState
		st.Config.Namespaces = tc.nss
		if got := st.ownsPIDNamespace(); got != tc.want {
			t.Errorf("%s: ownsPIDNamespace = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// waitForChildren polls until the process has at least n children.
func waitForChildren(t *testing.T, pid, n int) {
	t.Helper()
	path := "/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children"
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, _ := os.ReadFile(path)
		if len(strings.Fields(string(data))) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d has children %q, want %d", pid, data, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cgroupProcsFile is the container's cgroup.procs in the pids hierarchy
// (the unified one on a cgroup v2 host).
func cgroupProcsFile(parent, id string) string {
	if currentHost().cgroup2 {
		return cgroupRoot + parent + "/" + id + "/cgroup.procs"
	}
	return cgroupRoot + "/pids" + parent + "/" + id + "/cgroup.procs"
}

// waitForEmptyCgroup polls until the cgroup has no process (or is gone).
func waitForEmptyCgroup(t *testing.T, procs string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(procs)
		if err != nil || strings.TrimSpace(string(data)) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still lists %q after the kill", procs, data)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
