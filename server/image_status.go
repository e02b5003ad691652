package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/config"
	"github.com/minicri/minicri/image"
	"github.com/minicri/minicri/oci"
	"github.com/minicri/minicri/server/validate"
)

// ImageStatus describes one image. An image that is not there is answered
// with an empty status, not an error: that is how the kubelet learns it must
// pull.
func (s *Server) ImageStatus(ctx context.Context, req *runtime.ImageStatusRequest) (*runtime.ImageStatusResponse, error) {
	ref, err := validate.RequestedImage(req.GetImage())
	if err != nil {
		return nil, toStatus(err)
	}
	img, err := s.images.Get(ref)
	if errors.Is(err, image.ErrNotFound) {
		return &runtime.ImageStatusResponse{}, nil
	}
	if err != nil {
		return nil, toStatus(fmt.Errorf("image status %q: %w", ref, err))
	}
	resp := &runtime.ImageStatusResponse{Image: s.criImage(img)}
	if req.GetVerbose() {
		info, err := json.Marshal(img)
		if err != nil {
			return nil, toStatus(err)
		}
		resp.Info = map[string]string{"info": string(info)}
	}
	return resp, nil
}

// criImage is an image as the CRI describes it, with the user split the way
// the kubelet's runAsNonRoot check reads it: a uid only when it is exactly
// the uid the container will run as (oci.ParseID), else the name as
// written. A USER the create refuses ("4294967296", "-1", "+0") is reported
// as a name: a kubelet that asks for runAsNonRoot then refuses the pod
// itself, and none is told a number that the runtime would read otherwise.
// Pinned images (image.pinned_images) say so: the kubelet's image garbage
// collection passes them over.
func (s *Server) criImage(img image.Image) *runtime.Image {
	out := &runtime.Image{
		Id:          img.ID,
		RepoTags:    img.RepoTags,
		RepoDigests: img.RepoDigests,
		Size:        img.Size,
		Spec:        &runtime.ImageSpec{Image: img.ID},
		Pinned:      s.pinnedImages().Has(img),
	}
	user, _, _ := strings.Cut(img.Config.User, ":")
	if uid, numeric, err := oci.ParseID(user); numeric && err == nil {
		out.Uid = &runtime.Int64Value{Value: int64(uid)}
	} else {
		out.Username = user
	}
	return out
}

// pinnedImages reads image.pinned_images; a value that is no reference
// stops the start, naming its key.
func pinnedImages(cfg config.ImageConfig) (image.Pinned, error) {
	p := image.Pinned{}
	for _, name := range slices.Sorted(maps.Keys(cfg.PinnedImages)) {
		if err := p.Add(cfg.PinnedImages[name]); err != nil {
			return nil, &config.InvalidError{Key: "image.pinned_images." + name, Reason: err.Error()}
		}
	}
	return p, nil
}
