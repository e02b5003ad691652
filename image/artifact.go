package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"
)

// OCI artifacts (image-spec 1.1): a manifest whose content is not a
// container image, such as model weights, shipped as files. cri-o mounts
// them as image volumes; so does minicri. Each layer blob is one file, named
// by its org.opencontainers.image.title annotation, and the volume is the
// directory of those files, read-only.
//
// In the store an artifact is an Image whose ID is derived from its
// manifest digest (artifactID; the empty config that most artifacts share
// cannot name one) and whose layers are one file each: the layer dir of a file holds only that file, a hard
// link of its verified blob, so that an artifact takes no more disk than its
// blobs and no memory in proportion to its size. Layer dirs, rootfs records,
// garbage collection, ImageFsInfo (which counts a hard-linked inode once)
// and removal then treat it as any image.

// ErrArtifact: the image is an OCI artifact, usable only as an image volume
// (a pull from an archive refuses one too).
var ErrArtifact = errors.New("OCI artifact, not a container image")

// titleAnnotation names the file of an artifact's layer.
const titleAnnotation = "org.opencontainers.image.title"

// maxArtifactFiles bounds the files of one artifact: its volume is an
// overlay of one layer dir per file, and overlay stacks at most 500.
const maxArtifactFiles = 500

// isArtifact says whether m is an OCI artifact rather than a container
// image: it names an artifactType, or its config is the empty descriptor
// or some other type than an image config (the artifact type, by the image
// spec's rule for manifests without artifactType).
func isArtifact(m *v1.Manifest) bool {
	if m.ArtifactType != "" {
		return true
	}
	switch m.Config.MediaType {
	case types.DockerConfigJSON, types.OCIConfigJSON, "":
		return false
	}
	return true
}

// artifactType is the type an artifact says it is.
func artifactType(m *v1.Manifest) string {
	if m.ArtifactType != "" {
		return m.ArtifactType
	}
	return string(m.Config.MediaType)
}

// artifactFileName is the name of a layer's file in the volume: its title,
// or its digest's hex when it has none. A title is one path component,
// never "." or "..", no separator, no NUL nor other control character, at
// most NAME_MAX bytes: a name that could only ever make that one file
// inside the layer dir.
func artifactFileName(l v1.Descriptor) (string, error) {
	name, ok := l.Annotations[titleAnnotation]
	if !ok {
		return l.Digest.Hex, nil
	}
	switch {
	case name == "", name == ".", name == "..":
		return "", fmt.Errorf("layer %s: title %q is not a file name", l.Digest, name)
	case strings.ContainsAny(name, "/\x00"):
		return "", fmt.Errorf("layer %s: title %q is not one file name (no / or NUL)", l.Digest, name)
	case strings.ContainsFunc(name, unicode.IsControl):
		// A newline or an escape in a file name misleads whoever lists it.
		return "", fmt.Errorf("layer %s: title %q has a control character", l.Digest, name)
	case len(name) > unix.NAME_MAX:
		return "", fmt.Errorf("layer %s: title of %d bytes, longer than a file name's %d", l.Digest, len(name), unix.NAME_MAX)
	}
	return name, nil
}

// artifactID is the ID of the artifact whose manifest has digest m. An
// image's ID is the digest of its config, a blob a registry serves; were an
// artifact's ID a blob's digest too (its manifest's, as cri-o's is), an
// image whose config is byte for byte that manifest would have the
// artifact's ID and take over its record. So the ID is the digest of a
// string that no blob of a pull can be: it starts with a letter, and a
// config is a JSON object (fetchConfig parses it) or refused, so only a
// SHA-256 collision could give an image this ID. commit refuses one all
// the same.
func artifactID(m v1.Hash) v1.Hash {
	sum := sha256.Sum256([]byte("minicri OCI artifact\x00" + m.String()))
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// artifactFileID names the layer dir of one file: its name and its blob,
// and nothing else, so that artifacts with the same file share it. The
// prefix keeps it apart from the chain IDs of image layers.
func artifactFileID(name string, blob v1.Hash) v1.Hash {
	sum := sha256.Sum256([]byte("minicri artifact file\x00" + name + "\x00" + blob.String()))
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// ingestArtifact stores an artifact's layer blobs, lays each out as a file,
// and writes the record last. Its config is not fetched: nothing in it
// tells how to mount the files.
func (s *Store) ingestArtifact(ctx context.Context, m *v1.Manifest, manifestDigest v1.Hash, req ingestRequest) (Image, error) {
	if len(m.Layers) > maxArtifactFiles {
		return Image{}, fmt.Errorf("artifact of %d files: an image volume mounts at most %d", len(m.Layers), maxArtifactFiles)
	}
	names := make(map[string]bool, len(m.Layers))
	files := make([]string, len(m.Layers))
	for i, l := range m.Layers {
		name, err := artifactFileName(l)
		if err != nil {
			return Image{}, err
		}
		if names[name] {
			return Image{}, fmt.Errorf("two layers of the artifact are the file %q", name)
		}
		names[name] = true
		files[i] = name
	}
	budget := newBudget(s.opts.Limits)
	img := Image{
		ID:             artifactID(manifestDigest).String(),
		ManifestDigest: manifestDigest.String(),
		MediaType:      string(req.mediaType),
		ArtifactType:   artifactType(m),
	}
	if img.MediaType == "" {
		img.MediaType = string(types.OCIManifestSchema1)
	}
	if t, err := time.Parse(time.RFC3339, m.Annotations["org.opencontainers.image.created"]); err == nil {
		img.Created = t.UTC()
	}
	for i, l := range m.Layers {
		id := artifactFileID(files[i], l.Digest)
		img.Size += uint64(l.Size)
		img.Layers = append(img.Layers, Layer{Digest: l.Digest.String(), Size: l.Size, MediaType: string(l.MediaType), ChainID: id.String(), File: files[i]})
	}
	if err := s.fetchArtifactFiles(ctx, m.Layers, img.Layers, req, budget); err != nil {
		return Image{}, err
	}
	return s.commit(img, req.tags, req.repoDigests)
}

// fetchArtifactFiles downloads the blobs as fetchLayers does, each then
// laid out as its file.
func (s *Store) fetchArtifactFiles(ctx context.Context, descs []v1.Descriptor, layers []Layer, req ingestRequest, budget *unpackBudget) error {
	for i, d := range descs {
		// Charged before the download: the blob is the file.
		if err := budget.addBytes(d.Size); err != nil {
			return err
		}
		if err := budget.addEntry(); err != nil {
			return err
		}
		if err := s.ensureBlob(ctx, layerDownload, d, req.open, req.progress); err != nil {
			return fmt.Errorf("artifact layer %s: %w", d.Digest, err)
		}
		id, err := v1.NewHash(layers[i].ChainID)
		if err != nil {
			return err
		}
		if err := s.ensureArtifactFile(ctx, id, layers[i].File, d.Digest); err != nil {
			return err
		}
	}
	return nil
}

// ensureArtifactFile makes the layer dir id holding the one file name, a
// hard link of blob, unless it is there; complete or not at all, as
// ensureLayer does.
func (s *Store) ensureArtifactFile(ctx context.Context, id v1.Hash, name string, blob v1.Hash) error {
	if s.hasLayer(id) {
		return nil
	}
	return s.once(ctx, &s.layerFlight, id.Hex, func() error {
		if s.hasLayer(id) {
			return nil
		}
		return s.makeLayerDir(id, nil, func(tmp string) error {
			// A fresh dir of our own and a name without a separator: the
			// link is made in tmp and nowhere else. The blob is 0644 and
			// never written again; the volume is read-only.
			if err := os.Link(s.blobPath(blob), filepath.Join(tmp, name)); err != nil {
				return fmt.Errorf("artifact file %q: %w", name, err)
			}
			return nil
		})
	})
}
