package conmon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/minicri/minicri/conmon"
)

// A bundle whose root.path is an empty stage runs on the rootfs the
// options name, created by a new monitor and by a join of a shared one:
// the monitor binds it there in the create's own mount namespace. On the
// host the stage stays empty and unmounted.
func TestCreateFindsRootfsOnStage(t *testing.T) {
	stage := t.TempDir()
	joinDir := filepath.Join(t.TempDir(), "m")
	if err := os.Mkdir(joinDir, 0o700); err != nil {
		t.Fatal(err)
	}
	staged := func(o *conmon.Options, spec *specs.Spec) {
		spec.Root.Path = stage
		o.Rootfs, o.RootfsStage = rootfs, stage
	}
	first := newContainer(t, []string{"sh", "-c", "echo first-$(ls /minicri-pause); exec sleep 1000"}, func(spec *specs.Spec, o *conmon.Options) {
		staged(o, spec)
		o.JoinDir = joinDir
	})
	first.run()
	joined := newContainer(t, []string{"sh", "-c", "echo joined-$(ls /minicri-pause)"}, func(spec *specs.Spec, o *conmon.Options) { staged(o, spec) })
	joined.join(joinDir)
	for _, c := range []struct {
		c    *container
		want string
	}{{first, "first-/minicri-pause"}, {joined, "joined-/minicri-pause"}} {
		waitFor(t, c.want+" in the log", 10*time.Second, func() bool {
			return strings.Contains(strings.Join(lines(readLog(t, c.c.opts.LogPath)), "\n"), c.want)
		})
	}
	if entries, err := os.ReadDir(stage); err != nil || len(entries) != 0 {
		t.Errorf("the stage on the host holds %v (%v), want nothing", entries, err)
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err != nil || strings.Contains(string(b), " "+stage+" ") {
		t.Errorf("something is mounted on the stage on the host (%v)", err)
	}
}
