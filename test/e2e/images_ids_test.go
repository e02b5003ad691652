//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// TestImageCannotTakeOverAnArtifact: an image of no layers whose config
// blob is byte for byte an OCI artifact's manifest, pulled after the
// artifact, gets an ID and a record of its own: the artifact keeps its ID,
// its tag and its files, and a pod's image volume of it still reads its
// file. Before, both had the manifest's digest as ID, and the image's pull
// replaced the artifact's record: the volume came up empty.
func TestImageCannotTakeOverAnArtifact(t *testing.T) {
	d, busybox, _ := startImageVolumeDaemon(t)
	reg := registry.Start(t, registry.Options{})
	art := testimage.Artifact(t, "application/vnd.example.model.v1",
		testimage.ArtifactFile{Title: "model.txt", Content: "the victim's model\n"})
	manifest, err := art.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	victim := pushImage(t, reg, "victim/model:v1", art)
	evil := pushImage(t, reg, "evil/app:v1", testimage.ImageWithConfig(t, manifest))
	if evil.id != victim.digest {
		t.Fatalf("the attacker's image ID is %s, want the artifact's manifest digest %s", evil.id, victim.digest)
	}

	artID := d.pull(t, victim.ref)
	if got := d.pull(t, evil.ref); got != evil.id || got == artID {
		t.Fatalf("PullImage of the attacker's image = %s; want its config digest %s, not the artifact's ID %s", got, evil.id, artID)
	}
	st := d.imageStatus(t, victim.ref, true)
	if st.GetImage().GetId() != artID || !strings.Contains(st.GetInfo()["info"], `"artifactType":"application/vnd.example.model.v1"`) {
		t.Fatalf("ImageStatus of the artifact's tag after the image's pull: %v %v; want the artifact %s", st.GetImage(), st.GetInfo(), artID)
	}
	if got := d.imageStatus(t, evil.ref, false).GetImage().GetId(); got != evil.id {
		t.Fatalf("ImageStatus of the image's tag = %s, want %s", got, evil.id)
	}

	podCfg := d.hostNetworkPod("artifact-id")
	pod := d.runPod(t, podCfg)
	cfg := containerConfig("reader", busybox, "cat", "/model/model.txt")
	// The kubelet names an image volume by what PullImage answered.
	cfg.Mounts = []*runtime.Mount{{ContainerPath: "/model", Image: &runtime.ImageSpec{Image: artID}, Readonly: true}}
	cst, out := d.runToExit(t, pod, podCfg, cfg)
	if cst.GetExitCode() != 0 || out != "the victim's model\n" {
		t.Fatalf("the artifact's volume: exit %d, %q; want its file", cst.GetExitCode(), out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Runtime.RemoveContainer(ctx, cst.GetId()); err != nil {
		t.Fatal(err)
	}
}
