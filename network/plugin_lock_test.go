package network

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	"golang.org/x/sys/unix"

	"github.com/minicri/minicri/internal/procstat"
)

// A plugin, and whatever it runs, holds the plugin lock's open file as its
// fd 3: that is what keeps the lock held after the daemon dies.
func TestPluginsInheritThePluginLock(t *testing.T) {
	dir := t.TempDir()
	c := NewCNI(dir, nil, filepath.Join(dir, "cache"), nil)
	if err := c.AwaitOrphanPlugins(time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// The plugin's child (as an IPAM plugin is) reports what its fd 3 is.
	plugin := filepath.Join(dir, "plugin")
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\nsh -c 'stat -L -c %d:%i /proc/self/fd/3'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := c.exec.ExecPlugin(context.Background(), plugin, []byte("{}"), os.Environ())
	if err != nil {
		t.Fatalf("ExecPlugin: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "cache", pluginLockName), &st); err != nil {
		t.Fatal(err)
	}
	if want := strconv.FormatUint(st.Dev, 10) + ":" + strconv.FormatUint(st.Ino, 10); strings.TrimSpace(string(out)) != want {
		t.Errorf("the plugin's child has %q as fd 3, want the plugin lock (%s)", out, want)
	}
}

// A next daemon waits for the plugins a killed one left, and then holds
// the lock itself.
func TestAwaitOrphanPluginsWaitsForThem(t *testing.T) {
	cache := t.TempDir()
	old := NewCNI(t.TempDir(), nil, cache, nil)
	if err := old.AwaitOrphanPlugins(time.Second); err != nil {
		t.Fatal(err)
	}
	plugin, _ := orphanPlugin(t, old)
	old.Close() // the daemon dies; its plugin runs on

	next := NewCNI(t.TempDir(), nil, cache, nil)
	t.Cleanup(next.Close)
	go func() {
		time.Sleep(200 * time.Millisecond)
		_ = plugin.Process.Kill()
	}()
	if err := next.AwaitOrphanPlugins(time.Minute); err != nil {
		t.Fatal(err)
	}
	if procstat.Live(plugin.Process.Pid) {
		t.Errorf("took the plugin lock while the old daemon's plugin (pid %d) still ran", plugin.Process.Pid)
	}
	if next.exec.lock.Load() == nil {
		t.Fatal("the next daemon's plugins get no lock")
	}
	if err := unix.Flock(int(mustOpen(t, filepath.Join(cache, pluginLockName)).Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
		t.Error("the plugin lock is free after AwaitOrphanPlugins")
	}
}

// A plugin that never ends holds a start up only until the deadline: it is
// logged by pid, and the next daemon holds a new lock file.
func TestAwaitOrphanPluginsLeavesAHungOne(t *testing.T) {
	cache := t.TempDir()
	old := NewCNI(t.TempDir(), nil, cache, nil)
	if err := old.AwaitOrphanPlugins(time.Second); err != nil {
		t.Fatal(err)
	}
	plugin, pluginDone := orphanPlugin(t, old)
	old.Close()

	logger, hook := test.NewNullLogger()
	next := NewCNI(t.TempDir(), nil, cache, logger)
	t.Cleanup(next.Close)
	if err := next.AwaitOrphanPlugins(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pluginDone:
		t.Fatal("the hung plugin ended")
	default:
	}
	var warned bool
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && strings.Contains(e.Data["holders"].(string), "pid "+strconv.Itoa(plugin.Process.Pid)+" ") {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning naming the hung plugin (pid %d): %v", plugin.Process.Pid, hook.AllEntries())
	}
	if err := unix.Flock(int(mustOpen(t, filepath.Join(cache, pluginLockName)).Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
		t.Error("the new plugin lock is free after AwaitOrphanPlugins")
	}
}

// orphanPlugin starts a long "plugin" holding c's plugin lock, as the
// plugins a daemon runs do; done closes once it is reaped.
func orphanPlugin(t *testing.T, c *CNI) (cmd *exec.Cmd, done chan struct{}) {
	t.Helper()
	cmd = exec.Command("sleep", "60")
	cmd.ExtraFiles = []*os.File{c.exec.lock.Load()}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	return cmd, done
}

func mustOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
