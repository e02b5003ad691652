package server

import (
	"strings"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/image"
)

// An image named in image.pinned_images is pinned in ImageStatus and
// ListImages (the kubelet's image GC passes it over); the others are not.
// RemoveImage still removes it, as containerd's does.
func TestPinnedImagesAreReportedAndRemovable(t *testing.T) {
	ts := newTestServer(t, func(c *config.Config) {
		c.Image.PinnedImages = map[string]string{"base": "busybox"} // normalised: docker.io/library/busybox:latest
	})
	p, err := pinnedImages(ts.cfg.Image)
	if err != nil {
		t.Fatal(err)
	}
	ts.pinned.Store(&p)
	other := ts.images.Add("docker.io/library/nginx:1", image.Config{})

	st, err := ts.ImageStatus(bg, &runtime.ImageStatusRequest{Image: &runtime.ImageSpec{Image: "docker.io/library/busybox:latest"}})
	if err != nil || !st.GetImage().GetPinned() {
		t.Fatalf("ImageStatus(busybox) = %v, %v; want pinned", st.GetImage(), err)
	}
	list, err := ts.ListImages(bg, &runtime.ListImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	pinned := map[string]bool{}
	for _, img := range list.GetImages() {
		pinned[img.GetId()] = img.GetPinned()
	}
	if !pinned[ts.busybox.ID] || pinned[other.ID] || len(pinned) != 2 {
		t.Errorf("ListImages pinned = %v; want only busybox %s", pinned, ts.busybox.ID)
	}
	filtered, err := ts.ListImages(bg, &runtime.ListImagesRequest{Filter: &runtime.ImageFilter{Image: &runtime.ImageSpec{Image: ts.busybox.ID}}})
	if err != nil || len(filtered.GetImages()) != 1 || !filtered.GetImages()[0].GetPinned() {
		t.Errorf("ListImages filtered by ID = %v, %v; want busybox, pinned", filtered.GetImages(), err)
	}

	if _, err := ts.RemoveImage(bg, &runtime.RemoveImageRequest{Image: &runtime.ImageSpec{Image: "docker.io/library/busybox:latest"}}); err != nil {
		t.Fatalf("RemoveImage of a pinned image: %v, want it removed as containerd does", err)
	}
	if st, err := ts.ImageStatus(bg, &runtime.ImageStatusRequest{Image: &runtime.ImageSpec{Image: ts.busybox.ID}}); err != nil || st.GetImage() != nil {
		t.Errorf("after RemoveImage: ImageStatus = %v, %v; want no image", st.GetImage(), err)
	}
}

// A pinned reference that is no reference stops the start, naming its key.
func TestPinnedImagesRefuseWhatIsNoReference(t *testing.T) {
	_, err := pinnedImages(config.ImageConfig{PinnedImages: map[string]string{"ok": "busybox", "bad": "Not A Ref"}})
	if err == nil || !strings.Contains(err.Error(), `"image.pinned_images.bad"`) {
		t.Fatalf("pinnedImages = %v, want an error naming image.pinned_images.bad", err)
	}
}
