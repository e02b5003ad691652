//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func (d *Daemon) conditions(t *testing.T) map[string]*runtime.RuntimeCondition {
	t.Helper()
	resp, err := d.Runtime.Status(context.Background(), false)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	out := map[string]*runtime.RuntimeCondition{}
	for _, c := range resp.GetStatus().GetConditions() {
		out[c.GetType()] = c
	}
	return out
}

// The kubelet keeps the node NotReady while RuntimeReady is false: a node
// whose runtime binary is missing must say so, and why, rather than accept
// pods it cannot run.
func TestStatusRuntimeNotReadyWithoutRuntimeBinary(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-runc")
	d := StartDaemon(t, WithConfig("[runtime.handlers.runc]\npath = \""+missing+"\"\n"))
	c := d.conditions(t)[runtime.RuntimeReady]
	if c.GetStatus() || c.GetReason() != "RuntimeBinaryNotFound" || !strings.Contains(c.GetMessage(), missing) {
		t.Errorf("RuntimeReady = %+v, want false, reason RuntimeBinaryNotFound, message naming %s", c, missing)
	}
	// The CNI conf dir of the harness is empty.
	n := d.conditions(t)[runtime.NetworkReady]
	if n.GetStatus() || n.GetReason() != "NetworkPluginNotReady" || !strings.Contains(n.GetMessage(), filepath.Join(d.Dir, "cni")) {
		t.Errorf("NetworkReady = %+v, want false, reason NetworkPluginNotReady, naming the conf dir", n)
	}
}
