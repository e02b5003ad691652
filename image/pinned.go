package image

import "fmt"

// Pinned is the set of references a node keeps whatever the kubelet's
// image garbage collection decides (containerd's pinned_images), each
// normalised as the store names images: "busybox" is
// docker.io/library/busybox:latest. The zero value pins nothing.
type Pinned map[string]bool

// Add pins ref, a tag or digest reference. An image ID is refused: IDs
// change with every rebuild, and containerd pins names too.
func (p Pinned) Add(ref string) error {
	if idPattern.MatchString(ref) {
		return fmt.Errorf("%w: %q is an image ID; pin a reference (name:tag or name@sha256:…)", ErrInvalidReference, ref)
	}
	r, err := parseReference(ref)
	if err != nil {
		return err
	}
	p[r.String()] = true
	return nil
}

// Has says whether one of the image's tags or repo digests is pinned.
func (p Pinned) Has(img Image) bool {
	if len(p) == 0 {
		return false
	}
	for _, refs := range [][]string{img.RepoTags, img.RepoDigests} {
		for _, r := range refs {
			if p[r] {
				return true
			}
		}
	}
	return false
}
