package image

import (
	"errors"
	"strings"
	"testing"
)

// A pinned reference matches the image's tags and repo digests as the store
// writes them: short names are normalised, a digest pins the image it names
// whatever its tags, and an image with none of them is not pinned.
func TestPinnedMatchesNormalisedReferences(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	p := Pinned{}
	for _, ref := range []string{"busybox", "127.0.0.1:5000/app:v1", "quay.io/tools/kit@" + digest} {
		if err := p.Add(ref); err != nil {
			t.Fatalf("Add(%q): %v", ref, err)
		}
	}
	cases := []struct {
		name string
		img  Image
		want bool
	}{
		{"short name normalised", Image{RepoTags: []string{"docker.io/library/busybox:latest"}}, true},
		{"another tag of the repo", Image{RepoTags: []string{"docker.io/library/busybox:1.36"}}, false},
		{"registry with a port", Image{RepoTags: []string{"127.0.0.1:5000/app:v1"}}, true},
		{"pinned by repo digest, tag moved away", Image{RepoDigests: []string{"quay.io/tools/kit@" + digest}}, true},
		{"same digest, other repo", Image{RepoDigests: []string{"quay.io/other/kit@" + digest}}, false},
		{"no names", Image{ID: digest}, false},
	}
	for _, c := range cases {
		if got := p.Has(c.img); got != c.want {
			t.Errorf("%s: Has(%v %v) = %v, want %v", c.name, c.img.RepoTags, c.img.RepoDigests, got, c.want)
		}
	}
	if (Pinned{}).Has(Image{RepoTags: []string{"docker.io/library/busybox:latest"}}) {
		t.Error("an empty set pins an image")
	}
}

func TestPinnedRefusesWhatIsNoReference(t *testing.T) {
	for _, ref := range []string{"", "sha256:" + strings.Repeat("ab", 32), "Busybox", "a//b", "busybox:"} {
		if err := (Pinned{}).Add(ref); !errors.Is(err, ErrInvalidReference) {
			t.Errorf("Add(%q) = %v, want ErrInvalidReference", ref, err)
		}
	}
}
