package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image archives: an OCI image layout in a tar (oci-layout, index.json,
// blobs/sha256/…) or a `docker save` tar (manifest.json, a config and layer
// files). Export writes both at once: an OCI layout with a manifest.json
// beside it, which docker load, ctr import and Import all read.

// Annotations that name the images of an OCI layout.
const (
	annotationImageName = "io.containerd.image.name"          // the full reference
	annotationRefName   = "org.opencontainers.image.ref.name" // the tag (or, from some tools, the reference)
)

// maxArchiveLinks bounds symlink chains inside an archive.
const maxArchiveLinks = 8

// An archive is as hostile as a registry, and its index keeps the name of
// each of its files and links: the index is bounded, far above what image
// archives hold (a few entries per layer and image).
const (
	maxArchiveEntries   = 100_000
	maxArchiveNameBytes = 16 << 20
)

// archive is a tar file indexed by entry name. Entries are read in place
// (pread on sections of the file): nothing is extracted.
type archive struct {
	f     *os.File
	files map[string]archiveEntry
	links map[string]string // entry → target entry (symlinks and hard links)
}

type archiveEntry struct{ offset, size int64 }

func openArchive(p string) (*archive, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	a := &archive{f: f, files: map[string]archiveEntry{}, links: map[string]string{}}
	if err := a.index(); err != nil {
		f.Close()
		return nil, fmt.Errorf("read archive %s: %w", p, err)
	}
	return a, nil
}

func (a *archive) Close() error { return a.f.Close() }

// index records where each regular file's data starts: after Next the tar
// reader has consumed exactly the headers (it skips data by seeking).
func (a *archive) index() error {
	tr := tar.NewReader(a.f)
	entries, nameBytes := 0, 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeRegA || hdr.Typeflag == tar.TypeSymlink || hdr.Typeflag == tar.TypeLink {
			entries++
			nameBytes += len(name) + len(hdr.Linkname)
			if entries > maxArchiveEntries || nameBytes > maxArchiveNameBytes {
				return fmt.Errorf("more than %d files and links, or %d MiB of their names: not an image archive",
					maxArchiveEntries, maxArchiveNameBytes>>20)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeRegA:
			off, err := a.f.Seek(0, io.SeekCurrent)
			if err != nil {
				return err
			}
			a.files[name] = archiveEntry{offset: off, size: hdr.Size}
		case tar.TypeSymlink:
			a.links[name] = path.Join(path.Dir(name), hdr.Linkname)
		case tar.TypeLink:
			a.links[name] = path.Clean(strings.TrimPrefix(hdr.Linkname, "./"))
		}
	}
}

// entry finds a file by name, following links that stay inside the archive.
func (a *archive) entry(name string) (archiveEntry, error) {
	name = path.Clean(strings.TrimPrefix(name, "./"))
	for range maxArchiveLinks {
		if e, ok := a.files[name]; ok {
			return e, nil
		}
		target, ok := a.links[name]
		if !ok {
			return archiveEntry{}, fmt.Errorf("archive has no file %s: %w", name, os.ErrNotExist)
		}
		if strings.HasPrefix(target, "../") || strings.HasPrefix(target, "/") {
			return archiveEntry{}, fmt.Errorf("archive link %s points outside the archive", name)
		}
		name = target
	}
	return archiveEntry{}, fmt.Errorf("archive link %s: too many levels of links", name)
}

func (a *archive) has(name string) bool {
	_, err := a.entry(name)
	return err == nil
}

func (a *archive) open(name string) (io.Reader, int64, error) {
	e, err := a.entry(name)
	if err != nil {
		return nil, 0, err
	}
	return io.NewSectionReader(a.f, e.offset, e.size), e.size, nil
}

// readSmall reads a JSON document of the archive, refusing one above limit.
func (a *archive) readSmall(name string, limit int64) ([]byte, error) {
	r, size, err := a.open(name)
	if err != nil {
		return nil, err
	}
	if size > limit {
		return nil, fmt.Errorf("archive file %s of %d bytes is larger than the %d allowed", name, size, limit)
	}
	return io.ReadAll(r)
}

// blobOpener serves blobs/<alg>/<hex> of an OCI layout, or the files
// a docker-save manifest names (by digest, through byDigest).
func (a *archive) blobOpener(byDigest map[string]string) blobOpener {
	return func(_ context.Context, desc v1.Descriptor) (io.ReadCloser, error) {
		name := "blobs/" + desc.Digest.Algorithm + "/" + desc.Digest.Hex
		if p, ok := byDigest[desc.Digest.String()]; ok {
			name = p
		}
		r, _, err := a.open(name)
		if err != nil {
			return nil, err
		}
		return io.NopCloser(r), nil
	}
}

// Import adds the images of an archive (an OCI layout tar or a docker-save
// tar) to the store and returns them. It is safe while another process
// (the daemon) uses the store: the images appear whole or not at all.
func (s *Store) Import(ctx context.Context, archivePath string) ([]Image, error) {
	a, err := openArchive(archivePath)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	var reqs []ingestRequest
	switch {
	case a.has("index.json"):
		reqs, err = ociRequests(a)
	case a.has("manifest.json"):
		reqs, err = dockerSaveRequests(a)
	default:
		err = errors.New("neither an OCI image layout (index.json) nor a docker save archive (manifest.json)")
	}
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", archivePath, err)
	}
	images, err := s.ingestAll(ctx, reqs)
	s.collectRefused(err)
	if err != nil {
		return images, fmt.Errorf("import %s: %w", archivePath, err)
	}
	return images, nil
}

func (s *Store) ingestAll(ctx context.Context, reqs []ingestRequest) ([]Image, error) {
	release, err := s.holdContent()
	if err != nil {
		return nil, err
	}
	defer release()
	var images []Image
	for _, req := range reqs {
		img, err := s.ingest(ctx, req)
		if err != nil {
			return images, err
		}
		images = append(images, img)
	}
	return images, nil
}

func ociRequests(a *archive) ([]ingestRequest, error) {
	raw, err := a.readSmall("index.json", maxManifestSize)
	if err != nil {
		return nil, err
	}
	idx, err := v1.ParseIndexManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	open := a.blobOpener(nil)
	var reqs []ingestRequest
	for _, desc := range idx.Manifests {
		m, err := readArchiveManifest(a, desc)
		if err != nil {
			return nil, err
		}
		top := m.digest
		if m, err = resolveArchivePlatform(a, m); err != nil {
			return nil, err
		}
		req := ingestRequest{manifest: m.raw, mediaType: m.mediaType, open: open}
		for _, n := range layoutNames(desc.Annotations) {
			addName(&req, n, top.String())
		}
		reqs = append(reqs, req)
	}
	return reqs, nil
}

func readArchiveManifest(a *archive, desc v1.Descriptor) (manifest, error) {
	if err := checkDigest(desc.Digest); err != nil {
		return manifest{}, err
	}
	raw, err := a.readSmall("blobs/sha256/"+desc.Digest.Hex, maxManifestSize)
	if err != nil {
		return manifest{}, err
	}
	sum := sha256.Sum256(raw)
	if hex.EncodeToString(sum[:]) != desc.Digest.Hex {
		return manifest{}, fmt.Errorf("manifest %s: %w", desc.Digest, ErrDigestMismatch)
	}
	mt := desc.MediaType
	if mt == "" {
		var probe struct {
			MediaType types.MediaType `json:"mediaType"`
		}
		_ = json.Unmarshal(raw, &probe)
		mt = probe.MediaType
	}
	return manifest{raw: raw, mediaType: mt, digest: desc.Digest}, nil
}

func resolveArchivePlatform(a *archive, m manifest) (manifest, error) {
	return followIndex(m, func(child v1.Descriptor) (manifest, error) { return readArchiveManifest(a, child) })
}

// layoutNames reads the image names of an index.json entry: the containerd
// annotation, or a ref.name that is a whole reference (a bare tag names no
// repository, so no image).
func layoutNames(ann map[string]string) []string {
	if n := ann[annotationImageName]; n != "" {
		return []string{n}
	}
	if n := ann[annotationRefName]; strings.ContainsAny(n, "/:@") {
		return []string{n}
	}
	return nil
}

// addName adds a reference from an archive to the request: a tag, and the
// repo digest of the manifest the archive gave for it.
func addName(req *ingestRequest, ref, manifestDigest string) {
	named, err := parseReference(ref)
	if err != nil {
		return // an archive's odd name does not stop the import of the image
	}
	if named.tag != "" {
		req.tags = append(req.tags, named.String())
	}
	if manifestDigest != "" {
		req.repoDigests = append(req.repoDigests, named.withDigest(manifestDigest))
	}
}

// dockerSaveEntry is one image of a docker-save manifest.json.
type dockerSaveEntry struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// dockerSaveRequests makes an OCI manifest for each image of a docker-save
// archive (which has none): layers are kept as they are in the archive,
// compressed or not.
func dockerSaveRequests(a *archive) ([]ingestRequest, error) {
	raw, err := a.readSmall("manifest.json", maxManifestSize)
	if err != nil {
		return nil, err
	}
	var entries []dockerSaveEntry
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	byDigest := map[string]string{}
	var reqs []ingestRequest
	for _, e := range entries {
		m, err := dockerSaveManifest(a, e, byDigest)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		req := ingestRequest{manifest: b, mediaType: types.OCIManifestSchema1, open: a.blobOpener(byDigest)}
		for _, t := range e.RepoTags {
			addName(&req, t, "")
		}
		reqs = append(reqs, req)
	}
	return reqs, nil
}

func dockerSaveManifest(a *archive, e dockerSaveEntry, byDigest map[string]string) (*v1.Manifest, error) {
	cfg, err := describeArchiveFile(a, e.Config)
	if err != nil {
		return nil, err
	}
	cfg.MediaType = types.OCIConfigJSON
	byDigest[cfg.Digest.String()] = e.Config
	m := &v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Config: cfg}
	for _, p := range e.Layers {
		l, err := describeArchiveFile(a, p)
		if err != nil {
			return nil, err
		}
		byDigest[l.Digest.String()] = p
		m.Layers = append(m.Layers, l)
	}
	return m, nil
}

// describeArchiveFile hashes a file of the archive and tells its media type
// from its first bytes.
func describeArchiveFile(a *archive, name string) (v1.Descriptor, error) {
	r, size, err := a.open(name)
	if err != nil {
		return v1.Descriptor{}, err
	}
	h := sha256.New()
	var head [4]byte
	n, _ := io.ReadFull(r, head[:])
	h.Write(head[:n])
	if _, err := io.Copy(h, r); err != nil {
		return v1.Descriptor{}, fmt.Errorf("read %s: %w", name, err)
	}
	mt := types.OCIUncompressedLayer
	switch {
	case n >= 2 && head[0] == 0x1f && head[1] == 0x8b:
		mt = types.OCILayer
	case n == 4 && bytes.Equal(head[:], []byte{0x28, 0xb5, 0x2f, 0xfd}):
		mt = types.OCILayerZStd
	}
	return v1.Descriptor{
		MediaType: mt,
		Size:      size,
		Digest:    v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))},
	}, nil
}
