package image

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/minicri/minicri/test/registry"
	tim "github.com/minicri/minicri/test/testimage"
)

// An OCI artifact pulls into the store as an image whose ID is derived
// from its manifest digest (and is not that digest); its volume is the directory of its titled files, read-only, each a
// hard link of its blob (no copy); it cannot be a container's rootfs; and
// removing it leaves none of its blobs or layer dirs.
func TestPullArtifactAsImageVolume(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	art := tim.Artifact(t, "application/vnd.example.model.v1",
		tim.ArtifactFile{Title: "weights.bin", Content: "0123456789"},
		tim.ArtifactFile{Title: "config.json", Content: `{"layers":2}`},
		tim.ArtifactFile{Title: tim.NoTitle, Content: "untitled"})
	p := push(t, reg, "models/tiny:v1", art)
	s := newTestStore(t, Options{})

	img, err := s.Pull(testContext(t), p.ref, nil)
	if err != nil {
		t.Fatalf("pull artifact: %v", err)
	}
	if !img.IsArtifact() || img.ArtifactType != "application/vnd.example.model.v1" || img.ManifestDigest != p.digest {
		t.Fatalf("pulled %+v: want an artifact of its type and manifest digest %s", img, p.digest)
	}
	if want := artifactID(v1.Hash{Algorithm: "sha256", Hex: strings.TrimPrefix(p.digest, "sha256:")}).String(); img.ID != want || img.ID == p.digest {
		t.Fatalf("pulled artifact ID %s, want %s (not its manifest digest %s)", img.ID, want, p.digest)
	}
	if img.Size != uint64(len("0123456789")+len(`{"layers":2}`)+len("untitled")) {
		t.Errorf("size %d, want the files' bytes", img.Size)
	}
	if err := s.PrepareRootfs("ctr", img.ID); !errors.Is(err, ErrArtifact) {
		t.Errorf("PrepareRootfs of an artifact = %v, want ErrArtifact", err)
	}

	if err := s.PrepareImageVolume("vol", p.ref); err != nil {
		t.Fatalf("PrepareImageVolume: %v", err)
	}
	root, err := s.MountRootfs("vol")
	if err != nil {
		t.Fatalf("MountRootfs: %v", err)
	}
	untitled := mustLayers(t, art)[2]
	untitledDigest, _ := untitled.Digest()
	want := []string{"config.json", untitledDigest.Hex, "weights.bin"}
	slices.Sort(want)
	if got := dirNames(t, root); !slices.Equal(got, want) {
		t.Errorf("volume holds %v, want %v", got, want)
	}
	if data, err := os.ReadFile(filepath.Join(root, "weights.bin")); err != nil || string(data) != "0123456789" {
		t.Errorf("weights.bin = %q, %v", data, err)
	}
	if err := os.WriteFile(filepath.Join(root, "new"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write into the volume = %v, want EROFS", err)
	}
	var vol, blob syscall.Stat_t
	if err := syscall.Stat(filepath.Join(root, "weights.bin"), &vol); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(filepath.Join(s.path(blobsDir), mustLayerDigest(t, art, 0).Hex), &blob); err != nil {
		t.Fatal(err)
	}
	if vol.Ino != blob.Ino || vol.Mode&0o7777 != 0o644 {
		t.Errorf("weights.bin is inode %d mode %o, its blob inode %d: want the blob itself, 0644", vol.Ino, vol.Mode&0o7777, blob.Ino)
	}

	if err := s.Remove(img.ID); !errors.Is(err, ErrInUse) {
		t.Errorf("Remove while mounted as a volume = %v, want ErrInUse", err)
	}
	if err := s.RemoveRootfs("vol"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(p.ref); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if blobs, layers := dirNames(t, s.path(blobsDir)), dirNames(t, s.path(layersDir)); len(blobs) != 0 || len(layers) != 0 {
		t.Errorf("after removal: blobs %v, layers %v; want none", blobs, layers)
	}
}

func mustLayerDigest(t *testing.T, img v1.Image, i int) v1.Hash {
	t.Helper()
	d, err := mustLayers(t, img)[i].Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// An artifact whose file names could leave its directory, or name one file
// twice, is refused and leaves nothing.
func TestPullArtifactRefusesBadTitles(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	s := newTestStore(t, Options{})
	cases := []struct {
		name  string
		files []tim.ArtifactFile
		want  string
	}{
		{"parent", []tim.ArtifactFile{{Title: "../escape", Content: "x"}}, "not one file name"},
		{"dot dot", []tim.ArtifactFile{{Title: "..", Content: "x"}}, "not a file name"},
		{"dot", []tim.ArtifactFile{{Title: ".", Content: "x"}}, "not a file name"},
		{"empty", []tim.ArtifactFile{{Title: "", Content: "x"}}, "not a file name"},
		{"absolute", []tim.ArtifactFile{{Title: "/etc/passwd", Content: "x"}}, "not one file name"},
		{"nested", []tim.ArtifactFile{{Title: "a/b", Content: "x"}}, "not one file name"},
		{"newline", []tim.ArtifactFile{{Title: "a\nb", Content: "x"}}, "control character"},
		{"too long", []tim.ArtifactFile{{Title: strings.Repeat("a", 256), Content: "x"}}, "longer than a file name"},
		{"duplicate", []tim.ArtifactFile{{Title: "same", Content: "x"}, {Title: "same", Content: "y"}}, `two layers of the artifact are the file "same"`},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := push(t, reg, "bad/title:"+string(rune('a'+i)), tim.Artifact(t, "application/vnd.example", c.files...))
			_, err := s.Pull(testContext(t), p.ref, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("pull = %v, want an error saying %q", err, c.want)
			}
			assertNoImage(t, s)
			if layers := dirNames(t, s.path(layersDir)); len(layers) != 0 {
				t.Errorf("layers left: %v", layers)
			}
		})
	}
}

func TestIsArtifact(t *testing.T) {
	cases := []struct {
		name string
		m    v1.Manifest
		want bool
	}{
		{"image", v1.Manifest{Config: v1.Descriptor{MediaType: types.OCIConfigJSON}}, false},
		{"docker image", v1.Manifest{Config: v1.Descriptor{MediaType: types.DockerConfigJSON}}, false},
		{"artifactType", v1.Manifest{ArtifactType: "application/vnd.example", Config: v1.Descriptor{MediaType: types.OCIEmptyJSON}}, true},
		{"empty config", v1.Manifest{Config: v1.Descriptor{MediaType: types.OCIEmptyJSON}}, true},
		{"config of its own type", v1.Manifest{Config: v1.Descriptor{MediaType: "application/vnd.cncf.helm.config.v1+json"}}, true},
	}
	for _, c := range cases {
		if got := isArtifact(&c.m); got != c.want {
			t.Errorf("%s: isArtifact = %v, want %v", c.name, got, c.want)
		}
	}
}

// An artifact's files count against the unpack limits, before a byte of
// them is downloaded; one over them is refused and nothing of it stays.
func TestPullArtifactOverTheLimit(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	s := newTestStore(t, Options{Limits: Limits{MaxUnpackedBytes: 15}})
	p := push(t, reg, "big/model:v1", tim.Artifact(t, "application/vnd.example",
		tim.ArtifactFile{Title: "a", Content: "0123456789"}, tim.ArtifactFile{Title: "b", Content: "0123456789"}))
	_, err := s.Pull(testContext(t), p.ref, nil)
	var limit *LimitError
	if !errors.As(err, &limit) || limit.Key != "image.max_unpacked_bytes" {
		t.Fatalf("pull = %v, want a LimitError naming image.max_unpacked_bytes", err)
	}
	assertNoImage(t, s)
	if blobs, layers := dirNames(t, s.path(blobsDir)), dirNames(t, s.path(layersDir)); len(blobs) != 0 || len(layers) != 0 {
		t.Errorf("after a refused pull: blobs %v, layers %v; want none", blobs, layers)
	}
}

// An image whose config blob is byte for byte an artifact's manifest has
// that manifest's digest as its ID: it takes neither the artifact's ID nor
// its record nor its tags, whichever of the two is pulled first, and both
// stay what they are.
func TestImageCannotTakeAnArtifactsID(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	for _, artifactFirst := range []bool{true, false} {
		art := tim.Artifact(t, "application/vnd.example.model.v1", tim.ArtifactFile{Title: "model.txt", Content: fmt.Sprint("weights ", artifactFirst)})
		raw, err := art.RawManifest()
		if err != nil {
			t.Fatal(err)
		}
		victim := push(t, reg, fmt.Sprintf("victim/model:%v", artifactFirst), art)
		evil := push(t, reg, fmt.Sprintf("evil/app:%v", artifactFirst), tim.ImageWithConfig(t, raw))
		if evil.configID != victim.digest {
			t.Fatalf("the attacker's image has ID %s, want the artifact's manifest digest %s", evil.configID, victim.digest)
		}
		s := newTestStore(t, Options{})
		refs := []string{victim.ref, evil.ref}
		if !artifactFirst {
			refs[0], refs[1] = refs[1], refs[0]
		}
		for _, ref := range refs {
			if _, err := s.Pull(testContext(t), ref, nil); err != nil {
				t.Fatalf("pull %s: %v", ref, err)
			}
		}
		a, err := s.Get(victim.ref)
		if err != nil || !a.IsArtifact() || a.ManifestDigest != victim.digest || len(a.Layers) != 1 || a.Layers[0].File != "model.txt" {
			t.Fatalf("artifactFirst=%v: the artifact's tag names %+v, %v; want the artifact", artifactFirst, a, err)
		}
		img, err := s.Get(evil.ref)
		if err != nil || img.IsArtifact() || img.ID != evil.configID || img.ID == a.ID {
			t.Fatalf("artifactFirst=%v: the image's tag names %+v, %v; want an image of ID %s, not the artifact's %s", artifactFirst, img, err, evil.configID, a.ID)
		}
		if len(s.List()) != 2 {
			t.Errorf("artifactFirst=%v: %d records, want 2", artifactFirst, len(s.List()))
		}
	}
}

// commit never replaces nor retags a record of another kind with the same
// ID (an artifact of an older store's, whose ID was its manifest digest):
// ErrIDTaken, and the store is as it was.
func TestCommitRefusesARecordOfAnotherKind(t *testing.T) {
	s := newTestStore(t, Options{})
	id := "sha256:" + strings.Repeat("ab", 32)
	art := Image{ID: id, ManifestDigest: id, ArtifactType: "application/vnd.example.model.v1"}
	if _, err := s.commit(art, []string{"docker.io/library/model:v1"}, nil); err != nil {
		t.Fatal(err)
	}
	evil := Image{ID: id, ManifestDigest: "sha256:" + strings.Repeat("cd", 32)}
	if _, err := s.commit(evil, []string{"docker.io/library/model:v1", "docker.io/library/evil:v1"}, nil); !errors.Is(err, ErrIDTaken) {
		t.Fatalf("an image over an artifact: commit = %v, want ErrIDTaken", err)
	}
	got, err := s.Get(id)
	if err != nil || !got.IsArtifact() || !slices.Equal(got.RepoTags, []string{"docker.io/library/model:v1"}) || len(s.List()) != 1 {
		t.Fatalf("after the refused commit: %+v, %v, %d records; want the artifact as it was", got, err, len(s.List()))
	}
	img := Image{ID: "sha256:" + strings.Repeat("ef", 32), ManifestDigest: "sha256:" + strings.Repeat("01", 32)}
	if _, err := s.commit(img, []string{"docker.io/library/app:v1"}, nil); err != nil {
		t.Fatal(err)
	}
	art2 := Image{ID: img.ID, ManifestDigest: img.ID, ArtifactType: "application/vnd.example.model.v1"}
	if _, err := s.commit(art2, []string{"docker.io/library/app:v1"}, nil); !errors.Is(err, ErrIDTaken) {
		t.Fatalf("an artifact over an image: commit = %v, want ErrIDTaken", err)
	}
}

// An image whose config is byte for byte another image's, with a layer
// blob of its own for the same diff ID, is that image (one ID): its pull
// adds its tag to the record and changes nothing else. The layer is in, so
// the attacker's blob is never unpacked nor held to the diff ID; had the
// record taken its manifest, an export would ship that blob.
func TestPullKeepsTheRecordOfAnImageWithTheSameID(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	victimImg := tim.Busybox(t)
	victim := push(t, reg, "victim/app:v1", victimImg)
	config, err := victimImg.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	junk := static.NewLayer([]byte("not the layer the config's diff ID names"), types.OCILayer)
	evil := push(t, reg, "evil/app:v1", tim.ImageWithConfig(t, config, junk))
	if evil.configID != victim.configID {
		t.Fatalf("the attacker's image has ID %s, want the victim's %s", evil.configID, victim.configID)
	}
	s := newTestStore(t, Options{})
	before, err := s.Pull(testContext(t), victim.ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	after, err := s.Pull(testContext(t), evil.ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	if after.ID != before.ID || after.ManifestDigest != before.ManifestDigest || !slices.Equal(after.Layers, before.Layers) {
		t.Fatalf("after the attacker's pull the record is %+v, want the victim's %+v", after, before)
	}
	if !slices.Equal(after.RepoTags, []string{evil.ref, victim.ref}) {
		t.Errorf("tags %v, want both references", after.RepoTags)
	}
	if err := s.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	junkDigest, _ := junk.Digest()
	if blobExists(s, junkDigest.String()) {
		t.Errorf("the attacker's blob %s is kept", junkDigest)
	}
}
