package conmon_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/minicri/minicri/conmon"
)

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func errorIs(err, target error) bool { return errors.Is(err, target) }

func TestExitStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		args   []string
		kill   string // signal sent with runc kill once the container runs
		memory int64  // memory limit in bytes, 0 for none
		code   int
		reason string
	}{
		{name: "exit code", args: []string{"sh", "-c", "exit 3"}, code: 3},
		{name: "success", args: []string{"true"}, code: 0},
		{name: "killed", args: []string{"sleep", "100"}, kill: "KILL", code: 137},
		{name: "oom killed", args: []string{"sh", "-c", "head -c 200000000 /dev/zero | tail -c 100000000 >/dev/null"},
			memory: 16 << 20, code: 137, reason: "OOMKilled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newContainer(t, tc.args, func(s *specs.Spec, _ *conmon.Options) {
				if tc.memory != 0 {
					s.Linux.Resources.Memory = &specs.LinuxMemory{Limit: &tc.memory}
				}
			})
			c.run()
			started := time.Now()
			if tc.kill != "" {
				c.runc("kill", c.id, tc.kill)
			}
			e := c.waitExit(20 * time.Second)
			if e.Code != tc.code || e.Reason != tc.reason {
				t.Errorf("exit = code %d reason %q, want code %d reason %q", e.Code, e.Reason, tc.code, tc.reason)
			}
			if e.At.Before(started.Add(-time.Second)) || e.At.After(time.Now()) {
				t.Errorf("exit time %v is not between the start (%v) and now", e.At, started)
			}
		})
	}
}

func TestReadExitBeforeExit(t *testing.T) {
	_, ok, err := conmon.ReadExit(filepath.Join(t.TempDir(), "exit"))
	if ok || err != nil {
		t.Fatalf("ReadExit of a missing file: ok=%v err=%v, want ok=false and no error", ok, err)
	}
}

func TestReadExitMalformed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "exit")
	os.WriteFile(path, []byte("exit_code=x\n"), 0o600)
	if _, _, err := conmon.ReadExit(path); err == nil {
		t.Fatal("ReadExit of a malformed file: no error")
	}
}
