package image

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/errgroup"
)

// Bounds on the JSON documents read into memory; layers are streamed.
const (
	maxManifestSize = 4 << 20
	maxConfigSize   = 32 << 20
)

// ingestRequest is one image manifest to bring into the store, wherever it
// comes from (a registry or an archive).
type ingestRequest struct {
	manifest    []byte
	mediaType   types.MediaType
	open        blobOpener
	openAt      rangeOpener    // nil: a broken download is not resumed
	artifacts   bool           // an OCI artifact is taken (a registry pull), else refused
	tags        []string       // full references to point at the image
	repoDigests []string       // "repo@sha256:…"
	signatures  []SignatureSet // the look-ups of the policy that admitted it, kept
	progress    *pullProgress  // nil: no progress logs
}

// ingest stores the manifest, config and layer blobs, unpacks the layers,
// and writes the image record last.
func (s *Store) ingest(ctx context.Context, req ingestRequest) (Image, error) {
	m, err := parseImageManifest(req.manifest, req.mediaType)
	if err != nil {
		return Image{}, err
	}
	if req.mediaType == "" {
		req.mediaType = m.MediaType
	}
	if isArtifact(m) && !req.artifacts {
		return Image{}, fmt.Errorf("%w (%s): pull it from a registry, for an image volume", ErrArtifact, artifactType(m))
	}
	manifestDigest, err := s.putBlob(req.manifest)
	if err != nil {
		return Image{}, fmt.Errorf("store manifest: %w", err)
	}
	if isArtifact(m) {
		return s.ingestArtifact(ctx, m, manifestDigest, req)
	}
	cf, err := s.fetchConfig(ctx, m.Config, req.open, req.progress)
	if err != nil {
		return Image{}, err
	}
	if len(cf.RootFS.DiffIDs) != len(m.Layers) {
		return Image{}, fmt.Errorf("image config lists %d layers, the manifest %d", len(cf.RootFS.DiffIDs), len(m.Layers))
	}
	chains := chainIDs(cf.RootFS.DiffIDs)
	budget := newBudget(s.opts.Limits)
	if err := s.fetchLayers(ctx, m.Layers, cf.RootFS.DiffIDs, chains, req, budget); err != nil {
		return Image{}, err
	}
	img := newImage(m, cf, manifestDigest, req.mediaType, chains)
	img.Signatures = req.signatures
	return s.commit(img, req.tags, req.repoDigests)
}

func parseImageManifest(raw []byte, mt types.MediaType) (*v1.Manifest, error) {
	if mt.IsSchema1() {
		return nil, fmt.Errorf("docker schema 1 manifests (%s) are not supported", mt)
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse manifest: %w", err)
	}
	if mt == "" {
		mt = m.MediaType
	}
	if mt != "" && !mt.IsImage() {
		return nil, fmt.Errorf("manifest media type %s is not an image manifest", mt)
	}
	if err := checkDigest(m.Config.Digest); err != nil && !isArtifact(m) {
		return nil, fmt.Errorf("config: %w", err)
	}
	for _, l := range m.Layers {
		if err := checkDigest(l.Digest); err != nil {
			return nil, fmt.Errorf("layer: %w", err)
		}
		if l.Size < 0 {
			return nil, fmt.Errorf("layer %s: size %d", l.Digest, l.Size)
		}
		// An artifact's layers are files of any type.
		if !isArtifact(m) && !isLayerMediaType(l.MediaType) {
			return nil, fmt.Errorf("layer %s: unsupported media type %s", l.Digest, l.MediaType)
		}
	}
	return m, nil
}

func isLayerMediaType(mt types.MediaType) bool {
	switch mt {
	case types.DockerLayer, types.DockerUncompressedLayer, types.DockerForeignLayer,
		types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer,
		types.OCIRestrictedLayer, types.OCIUncompressedRestrictedLayer:
		return true
	}
	return false
}

func (s *Store) fetchConfig(ctx context.Context, desc v1.Descriptor, open blobOpener, progress *pullProgress) (*v1.ConfigFile, error) {
	if desc.Size > maxConfigSize {
		return nil, fmt.Errorf("image config of %d bytes is larger than the %d allowed", desc.Size, maxConfigSize)
	}
	if err := s.ensureBlob(ctx, configDownload, desc, open, progress); err != nil {
		return nil, fmt.Errorf("image config %s: %w", desc.Digest, err)
	}
	f, err := os.Open(s.blobPath(desc.Digest))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cf, err := v1.ParseConfigFile(f)
	if err != nil {
		return nil, fmt.Errorf("image config %s: %w", desc.Digest, err)
	}
	for _, d := range cf.RootFS.DiffIDs {
		if err := checkDigest(d); err != nil {
			return nil, fmt.Errorf("image config %s: diff ID: %w", desc.Digest, err)
		}
	}
	return cf, nil
}

// fetchLayers brings the layers in side by side (fetchLayer): up to
// MaxConcurrentDownloads downloads at once, each layer unpacked as its
// bytes arrive; the first failure cancels the rest.
func (s *Store) fetchLayers(ctx context.Context, layers []v1.Descriptor, diffIDs, chains []v1.Hash, req ingestRequest, budget *unpackBudget) error {
	g, ctx := errgroup.WithContext(ctx)
	downloads := make(chan struct{}, s.opts.MaxConcurrentDownloads)
	for i, l := range layers {
		g.Go(func() error {
			return s.fetchLayer(ctx, l, diffIDs[i], chains[i], req, budget, downloads)
		})
	}
	return g.Wait()
}

func newImage(m *v1.Manifest, cf *v1.ConfigFile, manifestDigest v1.Hash, mt types.MediaType, chains []v1.Hash) Image {
	if mt == "" {
		mt = types.OCIManifestSchema1 // an OCI manifest may leave its media type out
	}
	img := Image{
		ID:             m.Config.Digest.String(),
		ManifestDigest: manifestDigest.String(),
		MediaType:      string(mt),
		ConfigSize:     m.Config.Size,
		Size:           uint64(m.Config.Size),
		Platform:       platformString(cf.OS, cf.Architecture, cf.Variant),
		Created:        cf.Created.Time.UTC(),
		Config:         imageConfig(cf.Config),
	}
	for i, l := range m.Layers {
		img.Size += uint64(l.Size)
		img.Layers = append(img.Layers, Layer{
			Digest:    l.Digest.String(),
			Size:      l.Size,
			MediaType: string(l.MediaType),
			DiffID:    cf.RootFS.DiffIDs[i].String(),
			ChainID:   chains[i].String(),
		})
	}
	return img
}

func platformString(os, arch, variant string) string {
	p := os + "/" + arch
	if variant != "" {
		p += "/" + variant
	}
	return p
}

func imageConfig(c v1.Config) Config {
	return Config{
		User:         c.User,
		WorkingDir:   c.WorkingDir,
		StopSignal:   c.StopSignal,
		Env:          c.Env,
		Entrypoint:   c.Entrypoint,
		Cmd:          c.Cmd,
		Labels:       c.Labels,
		Volumes:      sortedSet(c.Volumes),
		ExposedPorts: sortedSet(c.ExposedPorts),
	}
}

func sortedSet(m map[string]struct{}) []string {
	if len(m) == 0 {
		return nil
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// commit writes the image record: tags move to this image from any other
// that had them. When the image was there, its record stays as it was and
// only gains the tags and repo digests: one ID is one config (or one
// artifact manifest), but another pull's manifest may name other layer
// blobs for the same diff IDs, which are not unpacked (the layers are in)
// and so never held to them. A record of the same ID but another kind (an
// artifact for an image, or an image for an artifact) is never replaced
// nor retagged: the commit fails with ErrIDTaken and the store is as it was.
func (s *Store) commit(img Image, tags, repoDigests []string) (Image, error) {
	var out Image
	_, err := s.update(func(images []Image) ([]Image, error) {
		at := -1
		for i := range images {
			if images[i].ID != img.ID {
				continue
			}
			if images[i].IsArtifact() != img.IsArtifact() {
				return nil, fmt.Errorf("%w: %s is %s", ErrIDTaken, img.ID, kindOf(images[i]))
			}
			at = i
		}
		for i := range images {
			if i == at {
				continue
			}
			images[i].RepoTags = without(images[i].RepoTags, tags)
		}
		if at < 0 {
			images = append(images, img)
			at = len(images) - 1
		} else {
			// The record stays as it was (its layers were checked when it
			// was made); it gains the names and the signatures of this pull.
			images[at].Signatures = mergeSignatureSets(images[at].Signatures, img.Signatures)
		}
		images[at].RepoTags = union(images[at].RepoTags, tags)
		images[at].RepoDigests = union(images[at].RepoDigests, repoDigests)
		out = images[at].clone()
		return images, nil
	})
	if err != nil {
		return Image{}, fmt.Errorf("record image %s: %w", img.ID, err)
	}
	return out, nil
}

func kindOf(img Image) string {
	if img.IsArtifact() {
		return "an OCI artifact (" + img.ArtifactType + ")"
	}
	return "a container image"
}

func union(a, b []string) []string {
	set := map[string]bool{}
	var out []string
	for _, s := range append(append([]string(nil), a...), b...) {
		if !set[s] {
			set[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

func without(list, drop []string) []string {
	var out []string
	for _, s := range list {
		keep := true
		for _, d := range drop {
			if s == d {
				keep = false
				break
			}
		}
		if keep {
			out = append(out, s)
		}
	}
	return out
}
