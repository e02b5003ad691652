//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// failingPluginScript is a CNI plugin that speaks every version and fails
// ADD; named ...failall, it fails DEL too, as a plugin that refuses the
// config does.
const failingPluginScript = `#!/bin/sh
cat >/dev/null
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.3.1","0.4.0","1.0.0"]}'; exit 0 ;;
DEL) case "$(basename "$0")" in *failall) ;; *) exit 0 ;; esac ;;
esac
echo '{"cniVersion":"1.0.0","code":11,"msg":"this plugin refuses every pod"}'
exit 1
`

// A RunPodSandbox whose CNI ADD fails leaves nothing: no mount, namespace
// pin, infra process, cgroup, pod dir or record, whether the plugin's DEL
// works or fails too. Before, a failed DEL kept everything the sandbox had
// made: at every retry of the kubelet, four mounts and an infra process
// (in its own scope under the systemd driver).
func TestFailedRunPodSandboxLeavesNothing(t *testing.T) {
	for _, plugin := range []string{"failadd", "failall"} {
		t.Run(plugin, func(t *testing.T) {
			bin := t.TempDir()
			if err := os.WriteFile(filepath.Join(bin, plugin), []byte(failingPluginScript), 0o755); err != nil {
				t.Fatal(err)
			}
			d := StartDaemon(t, WithArgs("--cni-bin-dirs", bin))
			conf := `{"cniVersion":"1.0.0","name":"e2e-fail","plugins":[{"type":"` + plugin + `"}]}`
			if err := os.MkdirAll(filepath.Join(d.Dir, "cni"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d.Dir, "cni", "10-fail.conflist"), []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg := d.podConfig("failnet")
			// An infra process too.
			cfg.Linux.SecurityContext = &runtime.LinuxSandboxSecurityContext{NamespaceOptions: &runtime.NamespaceOption{Pid: runtime.NamespaceMode_POD}}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for attempt := range 3 { // as the kubelet retries
				id, err := d.Runtime.RunPodSandbox(ctx, cfg, "")
				if err == nil {
					_ = d.Runtime.StopPodSandbox(ctx, id)
					_ = d.Runtime.RemovePodSandbox(ctx, id)
					t.Fatalf("attempt %d: RunPodSandbox succeeded on a plugin that fails ADD", attempt)
				}
			}
			pods, err := d.Runtime.ListPodSandbox(ctx, nil)
			if err != nil || len(pods) != 0 {
				t.Errorf("ListPodSandbox = %v, %v; want no pods", pods, err)
			}
			d.assertNoLeaks(t, leakCheck{})
		})
	}
}
