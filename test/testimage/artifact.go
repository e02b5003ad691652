package testimage

import (
	"encoding/json"
	"fmt"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ArtifactFile is one file layer of an OCI artifact.
type ArtifactFile struct {
	// Title is its org.opencontainers.image.title annotation, the file's
	// name; NoTitle leaves the annotation out.
	Title   string
	Content string
}

// NoTitle as an ArtifactFile's Title leaves the annotation out.
const NoTitle = "\x00none"

// emptyConfig is the OCI empty descriptor's content.
const emptyConfig = "{}"

// Artifact is an OCI artifact as oras pushes one: an image manifest with
// artifactType (when not empty) and the empty config, one layer per file.
func Artifact(t testing.TB, artifactType string, files ...ArtifactFile) v1.Image {
	t.Helper()
	a := &artifact{layers: map[v1.Hash]v1.Layer{}}
	cfg := static.NewLayer([]byte(emptyConfig), types.OCIEmptyJSON)
	cfgDesc, err := partial.Descriptor(cfg)
	if err != nil {
		t.Fatalf("testimage: artifact config: %v", err)
	}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: artifactType, Config: *cfgDesc}
	m.Config.Data = []byte(emptyConfig)
	for _, f := range files {
		l := static.NewLayer([]byte(f.Content), "application/octet-stream")
		d, err := partial.Descriptor(l)
		if err != nil {
			t.Fatalf("testimage: artifact layer: %v", err)
		}
		if f.Title != NoTitle {
			d.Annotations = map[string]string{"org.opencontainers.image.title": f.Title}
		}
		m.Layers = append(m.Layers, *d)
		a.layers[d.Digest] = l
	}
	if a.manifest, err = json.Marshal(m); err != nil {
		t.Fatalf("testimage: artifact manifest: %v", err)
	}
	img, err := partial.CompressedToImage(a)
	if err != nil {
		t.Fatalf("testimage: artifact: %v", err)
	}
	return img
}

type artifact struct {
	manifest []byte
	layers   map[v1.Hash]v1.Layer
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return []byte(emptyConfig), nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }

func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if l, ok := a.layers[h]; ok {
		return l, nil
	}
	if h.String() == "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a" {
		return static.NewLayer([]byte(emptyConfig), types.OCIEmptyJSON), nil
	}
	return nil, fmt.Errorf("artifact has no blob %s", h)
}

// ImageWithConfig is an image whose config blob is config, byte for byte,
// whatever it holds, and whose layers are layers, whatever the config says
// of them: an attacker's image whose config is another document (an
// artifact's manifest, another image's config) and so has that document's
// digest as its ID.
func ImageWithConfig(t testing.TB, config []byte, layers ...v1.Layer) v1.Image {
	t.Helper()
	r := &rawConfigImage{config: config, layers: map[v1.Hash]v1.Layer{}}
	cfg := static.NewLayer(config, types.OCIConfigJSON)
	desc, err := partial.Descriptor(cfg)
	if err != nil {
		t.Fatalf("testimage: config: %v", err)
	}
	r.layers[desc.Digest] = cfg
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Config: *desc, Layers: []v1.Descriptor{}}
	for _, l := range layers {
		d, err := partial.Descriptor(l)
		if err != nil {
			t.Fatalf("testimage: layer: %v", err)
		}
		m.Layers = append(m.Layers, *d)
		r.layers[d.Digest] = l
	}
	if r.manifest, err = json.Marshal(m); err != nil {
		t.Fatalf("testimage: manifest: %v", err)
	}
	img, err := partial.CompressedToImage(r)
	if err != nil {
		t.Fatalf("testimage: image: %v", err)
	}
	return img
}

type rawConfigImage struct {
	manifest, config []byte
	layers           map[v1.Hash]v1.Layer
}

func (r *rawConfigImage) RawConfigFile() ([]byte, error)      { return r.config, nil }
func (r *rawConfigImage) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (r *rawConfigImage) RawManifest() ([]byte, error)        { return r.manifest, nil }

func (r *rawConfigImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if l, ok := r.layers[h]; ok {
		return l, nil
	}
	return nil, fmt.Errorf("image has no blob %s", h)
}
