package server

import (
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/server/internal/lifecycle"
)

// The kubelet (KEP-5365) reports an image volume's image from the mount's
// image_ref, which is what PullImage answered (the image ID); image names
// it by digest; the config's mount itself stays as the kubelet sent it.
func TestStatusMountsNameTheImageVolumesDigest(t *testing.T) {
	const digest = "registry.local/vol@sha256:0123"
	cfg := &runtime.ContainerConfig{Mounts: []*runtime.Mount{
		{ContainerPath: "/data", HostPath: "/srv/data"},
		{ContainerPath: "/vol", Image: &runtime.ImageSpec{Image: "registry.local/vol:v1", Annotations: map[string]string{"a": "b"}}, Readonly: true},
	}}
	rec := lifecycle.ContainerRecord{ImageVolumes: []lifecycle.ImageVolume{{Mount: 1, ImageID: "sha256:0123", ImageRef: digest}}}
	got := statusMounts(rec, cfg)
	if len(got) != 2 || got[0].GetImage() != nil {
		t.Fatalf("mounts = %v, want the config's two, the first not an image", got)
	}
	img := got[1].GetImage()
	if img.GetImageRef() != "sha256:0123" || img.GetImage() != digest || img.GetAnnotations()["a"] != "b" {
		t.Errorf("image volume's image = %v, want image %q, image_ref sha256:0123 and the annotations kept", img, digest)
	}
	if cfg.Mounts[1].GetImage().GetImage() != "registry.local/vol:v1" || cfg.Mounts[1].GetImage().GetImageRef() != "" {
		t.Errorf("the config's mount was changed: %v", cfg.Mounts[1])
	}
}
