package fake

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/minicri/minicri/image"
)

// Images is an image store of images that are simply there, and of root
// filesystems that are plain directories.
type Images struct {
	Failures
	// DiffBytes, when set, is the size of the file WriteRootfsDiff writes.
	DiffBytes int
	dir       string
	mu        sync.Mutex
	images    map[string]image.Image // by ID
	rootfs    map[string]string      // container ID → its image's ID
	admits    []string
}

// NewImages keeps the root filesystems under dir.
func NewImages(dir string) *Images {
	return &Images{dir: dir, images: map[string]image.Image{}, rootfs: map[string]string{}}
}

// Add makes an image with one tag and the given config present.
func (s *Images) Add(tag string, cfg image.Config) image.Image {
	s.mu.Lock()
	defer s.mu.Unlock()
	img := image.Image{
		ID:          fmt.Sprintf("sha256:%064x", len(s.images)+1),
		RepoTags:    []string{tag},
		RepoDigests: []string{strings.SplitN(tag, ":", 2)[0] + fmt.Sprintf("@sha256:%064x", len(s.images)+100)},
		Size:        1000,
		Config:      cfg,
	}
	s.images[img.ID] = img
	return img
}

func (s *Images) find(ref string) (image.Image, bool) {
	for _, img := range s.images {
		if img.ID == ref || strings.TrimPrefix(img.ID, "sha256:") == ref {
			return img, true
		}
		for _, t := range append(append([]string{}, img.RepoTags...), img.RepoDigests...) {
			if t == ref {
				return img, true
			}
		}
	}
	return image.Image{}, false
}

func (s *Images) Get(ref string) (image.Image, error) {
	if err := s.err("Get"); err != nil {
		return image.Image{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if img, ok := s.find(ref); ok {
		return img, nil
	}
	return image.Image{}, fmt.Errorf("image %q: %w", ref, image.ErrNotFound)
}

func (s *Images) List() []image.Image {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]image.Image, 0, len(s.images))
	for _, img := range s.images {
		out = append(out, img)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// PullForNamespace makes the image present under ref.
func (s *Images) PullForNamespace(ctx context.Context, ref string, auth *image.Auth, namespace string) (image.Image, error) {
	if err := s.err("Pull"); err != nil {
		return image.Image{}, err
	}
	s.mu.Lock()
	img, ok := s.find(ref)
	s.mu.Unlock()
	if ok {
		return img, nil
	}
	return s.Add(ref, image.Config{Cmd: []string{"sh"}}), nil
}

// Admit admits every image, unless a failure is set for "Admit"; it
// records what it was asked (Admits).
func (s *Images) Admit(ctx context.Context, img image.Image, ref, namespace string) error {
	s.mu.Lock()
	s.admits = append(s.admits, namespace+"/"+ref)
	s.mu.Unlock()
	return s.err("Admit")
}

// Admits lists the "namespace/ref" of every Admit so far.
func (s *Images) Admits() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.admits)
}

// Remove removes an image; one that a root filesystem uses is in use, one
// that is not there is no error, as with image.Store.
func (s *Images) Remove(ref string) error {
	if err := s.err("Remove"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	img, ok := s.find(ref)
	if !ok {
		return nil
	}
	for _, id := range s.rootfs {
		if id == img.ID {
			return fmt.Errorf("image %s: %w", img.ID, image.ErrInUse)
		}
	}
	delete(s.images, img.ID)
	return nil
}

func (s *Images) FsInfo() (image.FsUsage, error) {
	if err := s.err("FsInfo"); err != nil {
		return image.FsUsage{}, err
	}
	return image.FsUsage{Mountpoint: s.dir, UsedBytes: 4096, InodesUsed: 1}, nil
}

func (s *Images) PrepareRootfs(id, imageID string) error {
	if err := s.err("PrepareRootfs"); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(s.dir, id, "etc"), 0o755); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rootfs[id] = imageID
	return nil
}

// PrepareImageVolume is PrepareRootfs: an image volume is a rootfs that
// is mounted read-only.
func (s *Images) PrepareImageVolume(id, imageID string) error {
	return s.PrepareRootfs(id, imageID)
}

// MountRootfsIDMapped is MountRootfs: the fake has no ownership to map.
func (s *Images) MountRootfsIDMapped(id string, _ image.IDMap) (string, error) {
	return s.MountRootfs(id)
}

func (s *Images) MountRootfs(id string) (string, error) {
	if err := s.err("MountRootfs"); err != nil {
		return "", err
	}
	return s.RootfsPath(id), nil
}

func (s *Images) RootfsPath(id string) string { return filepath.Join(s.dir, id) }

func (s *Images) RemoveRootfs(id string) error {
	if err := s.err("RemoveRootfs"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.rootfs, id)
	return os.RemoveAll(filepath.Join(s.dir, id))
}

func (s *Images) RootfsUsage(id string) (image.FsUsage, error) {
	if err := s.err("RootfsUsage"); err != nil {
		return image.FsUsage{}, err
	}
	return image.FsUsage{Mountpoint: filepath.Join(s.dir, id), UsedBytes: 512, InodesUsed: 2}, nil
}

// Rootfses lists the containers that have a root filesystem.
func (s *Images) Rootfses() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.rootfs))
}

// WriteRootfsDiff writes a tar of one file, "changed" (of DiffBytes
// bytes when set), and reports "/gone" deleted.
func (s *Images) WriteRootfsDiff(id string, w io.Writer, skip []string) ([]string, error) {
	if err := s.err("WriteRootfsDiff"); err != nil {
		return nil, err
	}
	body := []byte("new")
	if s.DiffBytes > 0 {
		body = bytes.Repeat([]byte("n"), s.DiffBytes)
	}
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: "changed", Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(body); err != nil {
		return nil, err
	}
	return []string{"/gone"}, tw.Close()
}
