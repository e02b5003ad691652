package validate

import (
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/image"
)

// The field rules of an image reference, as the image calls and a
// container's config send it.

// RequestedImage is the image reference an image call names (its
// image.image), checked.
func RequestedImage(spec *runtime.ImageSpec) (string, error) {
	ref := spec.GetImage()
	return ref, ImageRef("image.image", ref)
}

// ImageRef checks an image reference (or an image ID, which the
// kubelet also sends) before it reaches a registry client or a file name,
// with the grammar PullImage parses it by.
func ImageRef(field, ref string) error {
	if ref == "" {
		return Invalidf(field, "must name an image")
	}
	if len(ref) > maxValueLen {
		return Invalidf(field, "is %d bytes, longer than %d", len(ref), maxValueLen)
	}
	if err := image.ValidateReference(ref); err != nil {
		return Invalidf(field, "%v", err)
	}
	return nil
}
