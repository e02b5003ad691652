//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/testimage"
)

// The README's crictl walk-through works as written on an air-gapped node:
// busybox imported from a docker-save archive, then contrib/crictl's pod and
// container configs run.
func TestContribCrictlConfigsRun(t *testing.T) {
	d := StartDaemon(t)
	archive := filepath.Join(t.TempDir(), "busybox.tar")
	testimage.WriteDockerSave(t, archive, map[string]v1.Image{"busybox:latest": testimage.Busybox(t)})
	if code, stdout, stderr := d.imageCLI(t, "import", archive); code != 0 {
		t.Fatalf("minicri image import: exit %d\n%s%s", code, stdout, stderr)
	}
	d.bridgeNetwork(t)

	var podCfg runtime.PodSandboxConfig
	var ctrCfg runtime.ContainerConfig
	loadJSON(t, "../../contrib/crictl/pod-config.json", &podCfg)
	loadJSON(t, "../../contrib/crictl/container-config.json", &ctrCfg)
	podCfg.LogDirectory = filepath.Join(d.Dir, "logs") // not the node's /var/log/pods
	podCfg.Linux.CgroupParent = cgroupParent + "/contrib"
	pod := d.runPod(t, &podCfg)
	id := d.startContainer(t, pod, &podCfg, &ctrCfg)
	path := d.status(t, id).GetLogPath()
	waitFor(t, "the sample container's first line", 10*time.Second, func() bool {
		data, _ := os.ReadFile(path)
		return strings.Contains(parseLog(data), "UTC")
	})
	if err := d.Runtime.StopContainer(context.Background(), id, 1); err != nil {
		t.Fatal(err)
	}
}

func loadJSON(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
