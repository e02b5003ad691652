//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A container that asks for a CDI device, by CDI_devices or by a
// cdi.k8s.io/ annotation, gets the device node, environment and mount that
// the device's spec file names; the spec is written after the daemon
// started, as a DRA driver does.
func TestCDIDevicesInjected(t *testing.T) {
	d := NewDaemon(t)
	specDir := filepath.Join(d.Dir, "cdi")
	d.args = append(d.args, "--cdi-spec-dirs", specDir)
	d.Start()
	ref := busyboxRef(t)
	d.pull(t, ref)
	podCfg := d.hostNetworkPod("cdi")
	pod := d.runPod(t, podCfg)

	share := filepath.Join(d.Dir, "cdi-share")
	if err := os.MkdirAll(share, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(share, "file"), []byte("from-the-spec\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(specDir, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := fmt.Sprintf(`{
  "cdiVersion": "0.6.0",
  "kind": "example.com/mcdi",
  "devices": [{
    "name": "test",
    "containerEdits": {
      "deviceNodes": [{"path": "/dev/mcdi-test", "hostPath": "/dev/null"}],
      "env": ["MCDI_E2E=yes"],
      "mounts": [{"hostPath": %q, "containerPath": "/mcdi", "options": ["rbind", "ro"]}]
    }
  }]
}`, share)
	if err := os.WriteFile(filepath.Join(specDir, "mcdi.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}

	script := `test -c /dev/mcdi-test && echo node-ok; echo ok > /dev/mcdi-test && echo write-ok; echo "env=$MCDI_E2E"; cat /mcdi/file; touch /mcdi/x 2>/dev/null || echo mount-ro`
	for i, c := range []struct {
		name   string
		modify func(*runtime.ContainerConfig)
	}{
		{"CDI_devices", func(c *runtime.ContainerConfig) {
			c.CDIDevices = []*runtime.CDIDevice{{Name: "example.com/mcdi=test"}}
		}},
		{"annotation", func(c *runtime.ContainerConfig) {
			c.Annotations = map[string]string{"cdi.k8s.io/mcdi_test": "example.com/mcdi=test"}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := containerConfig(fmt.Sprintf("cdi%d", i), ref, "sh", "-c", script)
			c.modify(cfg)
			st, log := d.runToExit(t, pod, podCfg, cfg)
			for _, want := range []string{"node-ok", "write-ok", "env=yes", "from-the-spec", "mount-ro"} {
				if !strings.Contains(log, want) {
					t.Errorf("output lacks %q (exit %d):\n%s", want, st.GetExitCode(), log)
				}
			}
		})
	}

	t.Run("unknown device", func(t *testing.T) {
		cfg := containerConfig("unknown", ref, "true")
		cfg.CDIDevices = []*runtime.CDIDevice{{Name: "example.com/mcdi=nope"}}
		_, err := d.Runtime.CreateContainer(context.Background(), pod, cfg, podCfg)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "config.CDI_devices") {
			t.Fatalf("CreateContainer with an unknown CDI device: %v; want InvalidArgument naming config.CDI_devices", err)
		}
	})
}
