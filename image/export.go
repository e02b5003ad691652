package image

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// exportedImage is one image to export and the names it goes under.
type exportedImage struct {
	img   Image
	names []string
}

// Export writes the images refs name to archivePath: an OCI image layout
// with a docker-save manifest.json beside it, so that Import, docker load
// and ctr import all read it. A ref that is a tag exports the image under
// that tag; an ID exports it under all its tags. The archive appears whole
// or not at all (written to a temp file, then renamed).
func (s *Store) Export(ctx context.Context, refs []string, archivePath string) (retErr error) {
	if len(refs) == 0 {
		return fmt.Errorf("export: no image named")
	}
	release, err := s.holdContent()
	if err != nil {
		return err
	}
	defer release()
	images, err := s.exportSet(refs)
	if err != nil {
		return err
	}
	dir, base := filepath.Split(archivePath)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer func() {
		if retErr != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriterSize(tmp, 1<<20)
	if err := s.writeArchive(ctx, w, images); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return os.Rename(tmp.Name(), archivePath)
}

func (s *Store) exportSet(refs []string) ([]exportedImage, error) {
	c, err := s.current()
	if err != nil {
		return nil, err
	}
	var out []exportedImage
	at := map[string]int{}
	for _, ref := range refs {
		img, err := resolve(c.images, ref)
		if err != nil {
			return nil, fmt.Errorf("export %s: %w", ref, err)
		}
		if img.IsArtifact() {
			// An archive holds container images, which an import takes.
			return nil, fmt.Errorf("export %s: %w (%s)", ref, ErrArtifact, img.ArtifactType)
		}
		names := img.RepoTags
		if named, err := parseReference(ref); err == nil && named.tag != "" && contains(img.RepoTags, named.String()) {
			names = []string{named.String()}
		}
		if i, ok := at[img.ID]; ok {
			out[i].names = union(out[i].names, names)
			continue
		}
		at[img.ID] = len(out)
		out = append(out, exportedImage{img: img.clone(), names: names})
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (s *Store) writeArchive(ctx context.Context, w io.Writer, images []exportedImage) error {
	tw := tar.NewWriter(w)
	if err := writeTarBytes(tw, "oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	index := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	var saves []dockerSaveEntry
	written := map[string]bool{}
	for _, e := range images {
		if err := s.writeImageBlobs(ctx, tw, e.img, written); err != nil {
			return err
		}
		fi, err := os.Stat(s.path(blobsDir, strings.TrimPrefix(e.img.ManifestDigest, "sha256:")))
		if err != nil {
			return fmt.Errorf("manifest of %s: %w", e.img.ID, err)
		}
		index.Manifests = append(index.Manifests, indexEntries(e, fi.Size())...)
		saves = append(saves, dockerSaveEntryOf(e))
	}
	for _, doc := range []struct {
		name string
		v    any
	}{{"index.json", index}, {"manifest.json", saves}} {
		b, err := json.Marshal(doc.v)
		if err != nil {
			return err
		}
		if err := writeTarBytes(tw, doc.name, b); err != nil {
			return err
		}
	}
	return tw.Close()
}

func (s *Store) writeImageBlobs(ctx context.Context, tw *tar.Writer, img Image, written map[string]bool) error {
	digests := []string{img.ManifestDigest, img.ID}
	for _, l := range img.Layers {
		digests = append(digests, l.Digest)
	}
	for _, d := range digests {
		if written[d] {
			continue
		}
		if err := s.writeBlob(ctx, tw, d); err != nil {
			return err
		}
		written[d] = true
	}
	return nil
}

func (s *Store) writeBlob(ctx context.Context, tw *tar.Writer, digest string) error {
	h, err := v1.NewHash(digest)
	if err != nil {
		return err
	}
	if err := checkDigest(h); err != nil {
		return err
	}
	f, err := os.Open(s.blobPath(h))
	if err != nil {
		return fmt.Errorf("blob %s: %w", digest, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: "blobs/sha256/" + h.Hex, Mode: 0o644, Size: fi.Size()}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = io.Copy(tw, contextReader{ctx, f})
	return err
}

func writeTarBytes(tw *tar.Writer, name string, b []byte) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b))}); err != nil {
		return err
	}
	_, err := tw.Write(b)
	return err
}

// indexEntries lists the image once per name (once without a name if it has none).
func indexEntries(e exportedImage, manifestSize int64) []v1.Descriptor {
	h, _ := v1.NewHash(e.img.ManifestDigest)
	desc := v1.Descriptor{MediaType: types.MediaType(e.img.MediaType), Digest: h, Size: manifestSize}
	var out []v1.Descriptor
	for _, n := range e.names {
		d := desc
		tag := n[strings.LastIndex(n, ":")+1:]
		d.Annotations = map[string]string{annotationImageName: n, annotationRefName: tag}
		out = append(out, d)
	}
	if len(out) == 0 {
		out = append(out, desc)
	}
	return out
}

func dockerSaveEntryOf(e exportedImage) dockerSaveEntry {
	entry := dockerSaveEntry{Config: "blobs/sha256/" + strings.TrimPrefix(e.img.ID, "sha256:"), RepoTags: e.names}
	for _, l := range e.img.Layers {
		entry.Layers = append(entry.Layers, "blobs/sha256/"+strings.TrimPrefix(l.Digest, "sha256:"))
	}
	return entry
}
