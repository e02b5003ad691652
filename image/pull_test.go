package image

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/minicri/minicri/test/registry"
	tim "github.com/minicri/minicri/test/testimage"
)

func TestPullByTagAndDigest(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	img := tim.Busybox(t,
		tim.WithEntrypoint("/bin/sh", "-c"), tim.WithCmd("echo hi"), tim.WithEnv("A=1"),
		tim.WithWorkingDir("/tmp"), tim.WithUser("1000"), tim.WithStopSignal("SIGINT"),
		tim.WithLabels(map[string]string{"app": "demo"}),
		tim.WithConfig(func(c *v1.Config) {
			c.Volumes = map[string]struct{}{"/data": {}}
			c.ExposedPorts = map[string]struct{}{"80/tcp": {}}
		}))
	p := push(t, reg, "demo/busybox:1.0", img)
	s := newTestStore(t, Options{})

	got, err := s.Pull(testContext(t), p.ref, nil)
	if err != nil {
		t.Fatalf("pull by tag: %v", err)
	}
	wantSize := uint64(0)
	for _, l := range mustLayers(t, img) {
		size, _ := l.Size()
		wantSize += uint64(size)
	}
	cfgRaw, _ := img.RawConfigFile()
	wantSize += uint64(len(cfgRaw))
	want := Image{
		ID:          p.configID,
		RepoTags:    []string{p.ref},
		RepoDigests: []string{reg.Host() + "/demo/busybox@" + p.digest},
		Size:        wantSize,
		Config: Config{
			User: "1000", WorkingDir: "/tmp", StopSignal: "SIGINT",
			Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "A=1"},
			Entrypoint:   []string{"/bin/sh", "-c"},
			Cmd:          []string{"echo hi"},
			Labels:       map[string]string{"app": "demo"},
			Volumes:      []string{"/data"},
			ExposedPorts: []string{"80/tcp"},
		},
	}
	assertImage(t, got, want)
	if got.ManifestDigest != p.digest || got.MediaType != string(types.DockerManifestSchema2) || got.Platform != "linux/"+runtimeArch() {
		t.Errorf("manifest %s (%s, %s), want %s (%s, linux/%s)", got.ManifestDigest, got.MediaType, got.Platform, p.digest, types.DockerManifestSchema2, runtimeArch())
	}
	for _, l := range got.Layers {
		if !s.hasLayer(mustHash(t, l.ChainID)) {
			t.Errorf("layer %s not unpacked", l.ChainID)
		}
	}

	// Get answers to the ID, a prefix of it, the tag and the repo digest.
	for _, ref := range []string{p.configID, strings.TrimPrefix(p.configID, "sha256:"), strings.TrimPrefix(p.configID, "sha256:")[:12], p.ref, got.RepoDigests[0]} {
		if g, err := s.Get(ref); err != nil || g.ID != p.configID {
			t.Errorf("Get(%q) = %s, %v; want %s", ref, g.ID, err, p.configID)
		}
	}
	if _, err := s.Get(reg.Host() + "/demo/busybox:2.0"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of an unknown tag: %v, want ErrNotFound", err)
	}

	// By digest: the same image, no new tag.
	byDigest := reg.Host() + "/demo/busybox@" + p.digest
	got2, err := s.Pull(testContext(t), byDigest, nil)
	if err != nil {
		t.Fatalf("pull by digest: %v", err)
	}
	if got2.ID != p.configID || !slices.Equal(got2.RepoTags, []string{p.ref}) {
		t.Errorf("pull by digest: %s %v, want %s with tags unchanged", got2.ID, got2.RepoTags, p.configID)
	}
	if list := s.List(); len(list) != 1 {
		t.Errorf("List has %d images, want 1", len(list))
	}
}

func TestPullMovesTag(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	s := newTestStore(t, Options{})
	old := push(t, reg, "app:latest", tim.Busybox(t, tim.WithCmd("old")))
	if _, err := s.Pull(testContext(t), old.ref, nil); err != nil {
		t.Fatal(err)
	}
	cur := push(t, reg, "app:latest", tim.Busybox(t, tim.WithCmd("new")))
	if _, err := s.Pull(testContext(t), old.ref, nil); err != nil {
		t.Fatal(err)
	}
	oldImg, err := s.Get(old.configID)
	if err != nil {
		t.Fatal(err)
	}
	if len(oldImg.RepoTags) != 0 || len(oldImg.RepoDigests) != 1 {
		t.Errorf("old image keeps tags %v digests %v; want no tag, its repo digest", oldImg.RepoTags, oldImg.RepoDigests)
	}
	if g, _ := s.Get(old.ref); g.ID != cur.configID {
		t.Errorf("tag resolves to %s, want the new image %s", g.ID, cur.configID)
	}
}

func TestPullOCIImageAndManifestList(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	s := newTestStore(t, Options{})

	oci := push(t, reg, "oci:1", tim.Busybox(t, tim.OCI()))
	got, err := s.Pull(testContext(t), oci.ref, nil)
	if err != nil {
		t.Fatalf("pull OCI image: %v", err)
	}
	if got.ID != oci.configID || got.MediaType != string(types.OCIManifestSchema1) {
		t.Errorf("OCI image: %s %s, want %s %s", got.ID, got.MediaType, oci.configID, types.OCIManifestSchema1)
	}

	native := tim.Busybox(t, tim.WithLabels(map[string]string{"arch": "native"}))
	other := tim.Busybox(t, tim.WithLabels(map[string]string{"arch": "other"}))
	otherArch := "arm64"
	if runtimeArch() == "arm64" {
		otherArch = "amd64"
	}
	idx := tim.Index(t, map[string]v1.Image{"linux/" + runtimeArch(): native, "linux/" + otherArch: other})
	ref := reg.Host() + "/multi:1"
	idxDigest := tim.PushIndex(t, idx, ref)
	got, err = s.Pull(testContext(t), ref, nil)
	if err != nil {
		t.Fatalf("pull manifest list: %v", err)
	}
	if got.ID != tim.ConfigDigest(t, native) || got.Config.Labels["arch"] != "native" {
		t.Errorf("manifest list resolved to %s (labels %v), want the linux/%s image %s", got.ID, got.Config.Labels, runtimeArch(), tim.ConfigDigest(t, native))
	}
	if want := reg.Host() + "/multi@" + idxDigest; !slices.Equal(got.RepoDigests, []string{want}) {
		t.Errorf("repo digests %v, want [%s] (the list's digest)", got.RepoDigests, want)
	}
	if got.ManifestDigest != tim.Digest(t, native) {
		t.Errorf("manifest digest %s, want the platform manifest %s", got.ManifestDigest, tim.Digest(t, native))
	}

	onlyOther := tim.Index(t, map[string]v1.Image{"linux/" + otherArch: other})
	tim.PushIndex(t, onlyOther, reg.Host()+"/foreign:1")
	if _, err := s.Pull(testContext(t), reg.Host()+"/foreign:1", nil); err == nil || !strings.Contains(err.Error(), "no image for linux/"+runtimeArch()) {
		t.Errorf("pull of a list without this platform: %v", err)
	}
}

func TestPullThroughMirror(t *testing.T) {
	upstream := registry.Start(t, registry.Options{})
	mirror := registry.Start(t, registry.Options{})
	img := tim.Busybox(t)
	p := push(t, upstream, "lib/busybox:1", img)
	push(t, mirror, "lib/busybox:1", img)
	s := newTestStore(t, Options{Registries: map[string]RegistryConfig{
		upstream.Host(): {Mirrors: []string{"http://" + mirror.Host()}},
	}})

	upstream.Stop()
	got, err := s.Pull(testContext(t), p.ref, nil)
	if err != nil {
		t.Fatalf("pull with the upstream down: %v", err)
	}
	if !slices.Equal(got.RepoTags, []string{p.ref}) || !strings.HasPrefix(got.RepoDigests[0], upstream.Host()+"/") {
		t.Errorf("tags %v digests %v: want them named after the upstream, not the mirror", got.RepoTags, got.RepoDigests)
	}
	if err := s.Remove(p.ref); err != nil {
		t.Fatal(err)
	}

	mirror.Stop()
	upstream.Restart()
	if _, err := s.Pull(testContext(t), p.ref, nil); err != nil {
		t.Fatalf("pull with the mirror down: %v", err)
	}

	upstream.Stop()
	if err := s.Remove(p.ref); err != nil {
		t.Fatal(err)
	}
	_, err = s.Pull(testContext(t), p.ref, nil)
	if err == nil || !strings.Contains(err.Error(), "mirror http://"+mirror.Host()) || !strings.Contains(err.Error(), "registry "+upstream.Host()) {
		t.Errorf("pull with both down: %v; want an error naming both endpoints", err)
	}
}

func TestPullInsecureRegistry(t *testing.T) {
	reg := registry.Start(t, registry.Options{TLS: true})
	img := tim.Busybox(t)
	ref := reg.Host() + "/tls:1"
	tim.Push(t, img, ref, remoteTransport(reg))

	strict := newTestStore(t, Options{})
	if _, err := strict.Pull(testContext(t), ref, nil); err == nil {
		t.Fatal("pull from a self-signed registry that is not marked insecure succeeded")
	}
	assertNoImage(t, strict)

	insecure := newTestStore(t, Options{Registries: map[string]RegistryConfig{reg.Host(): {Insecure: true}}})
	if _, err := insecure.Pull(testContext(t), ref, nil); err != nil {
		t.Fatalf("pull from an insecure registry: %v", err)
	}
}

func TestPullBasicAuth(t *testing.T) {
	reg := registry.Start(t, registry.Options{Users: map[string]string{"alice": "s3cret"}})
	img := tim.Busybox(t)
	ref := reg.Host() + "/private:1"
	tim.Push(t, img, ref, remoteAuth("alice", "s3cret"))
	s := newTestStore(t, Options{})

	for _, tc := range []struct {
		name string
		auth *Auth
	}{
		{"anonymous", nil},
		{"wrong password", &Auth{Username: "alice", Password: "wrong"}},
	} {
		_, err := s.Pull(testContext(t), ref, tc.auth)
		if !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s: pull = %v, want ErrUnauthorized", tc.name, err)
		}
		assertNoImage(t, s)
	}
	got, err := s.Pull(testContext(t), ref, &Auth{Username: "alice", Password: "s3cret"})
	if err != nil {
		t.Fatalf("pull with the right password: %v", err)
	}
	if got.ID != tim.ConfigDigest(t, img) {
		t.Fatalf("pulled %s, want %s", got.ID, tim.ConfigDigest(t, img))
	}
}

// TestPullCutOffLeavesNothing stops the registry in the middle of a layer
// download: no image appears, nothing half-made stays, and once the
// registry is back the pull succeeds.
func TestPullCutOffLeavesNothing(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := push(t, reg, "cut:1", tim.Busybox(t))
	px := startProxy(t, reg.Host())
	layer := layerDigests(t, p.img)[0]
	px.setTamper(func(digest string, body io.ReadCloser) io.ReadCloser {
		if digest != layer {
			return body
		}
		return &cutReader{ReadCloser: body, after: 64 << 10, cut: reg.Stop}
	})
	s := newTestStore(t, Options{})
	ref := px.host() + "/cut:1"
	if _, err := s.Pull(testContext(t), ref, nil); err == nil {
		t.Fatal("pull succeeded through a cut connection")
	}
	assertNoImage(t, s)
	if blobExists(s, layer) {
		t.Fatal("the cut-off layer blob was kept")
	}

	px.setTamper(nil)
	reg.Restart()
	got, err := s.Pull(testContext(t), ref, nil)
	if err != nil {
		t.Fatalf("pull after the registry came back: %v", err)
	}
	if got.ID != p.configID {
		t.Fatalf("pulled %s, want %s", got.ID, p.configID)
	}
}

// cutReader passes `after` bytes, then calls cut and fails like a dropped
// connection.
type cutReader struct {
	io.ReadCloser
	after int
	cut   func()
	once  sync.Once
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.after <= 0 {
		c.once.Do(c.cut)
		return 0, io.ErrUnexpectedEOF
	}
	if len(p) > c.after {
		p = p[:c.after]
	}
	n, err := c.ReadCloser.Read(p)
	c.after -= n
	return n, err
}

func TestPullCorruptBlobKeepsNothing(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := push(t, reg, "corrupt:1", tim.Busybox(t))
	px := startProxy(t, reg.Host())
	layer := layerDigests(t, p.img)[0]
	px.setTamper(func(digest string, body io.ReadCloser) io.ReadCloser {
		if digest != layer {
			return body
		}
		return &flipReader{ReadCloser: body, at: 1000}
	})
	s := newTestStore(t, Options{})
	_, err := s.Pull(testContext(t), px.host()+"/corrupt:1", nil)
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("pull of a corrupted layer = %v, want ErrDigestMismatch", err)
	}
	assertNoImage(t, s)
	if blobExists(s, layer) {
		t.Fatal("the corrupted blob was kept")
	}
	if layers := dirNames(t, s.path(layersDir)); len(layers) != 0 {
		t.Fatalf("layers unpacked from a corrupted blob: %v", layers)
	}
}

// flipReader flips one byte of the stream.
type flipReader struct {
	io.ReadCloser
	at, pos int
}

func (f *flipReader) Read(p []byte) (int, error) {
	n, err := f.ReadCloser.Read(p)
	if f.at >= f.pos && f.at < f.pos+n {
		p[f.at-f.pos] ^= 0xff
	}
	f.pos += n
	return n, err
}

// TestConcurrentPullsDownloadOnce pulls one image from four goroutines and
// counts the blob downloads the registry saw.
func TestConcurrentPullsDownloadOnce(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := push(t, reg, "multi:1", tim.MultiLayer(t))
	px := startProxy(t, reg.Host())
	s := newTestStore(t, Options{})
	ref := px.host() + "/multi:1"

	var wg sync.WaitGroup
	errs := make([]error, 4)
	ids := make([]string, 4)
	for i := range errs {
		wg.Go(func() {
			img, err := s.Pull(testContext(t), ref, nil)
			errs[i], ids[i] = err, img.ID
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil || ids[i] != p.configID {
			t.Fatalf("pull %d: %s, %v", i, ids[i], err)
		}
	}
	gets := px.gets()
	for _, d := range append(layerDigests(t, p.img), p.configID) {
		if gets[d] != 1 {
			t.Errorf("blob %s downloaded %d times, want 1 (all: %v)", d, gets[d], gets)
		}
	}
}

func TestPullTimeout(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	push(t, reg, "slow:1", tim.Busybox(t))
	px := startProxy(t, reg.Host())
	px.setTamper(func(_ string, body io.ReadCloser) io.ReadCloser { return &slowReader{body} })
	s := newTestStore(t, Options{PullTimeout: 300 * time.Millisecond})
	start := time.Now()
	_, err := s.Pull(testContext(t), px.host()+"/slow:1", nil)
	if err == nil || !strings.Contains(err.Error(), "pull timeout") {
		t.Fatalf("pull = %v, want a pull timeout error", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("a pull with a 300ms timeout took %v", took)
	}
	assertNoImage(t, s)
}

// slowReader trickles a blob out.
type slowReader struct{ io.ReadCloser }

func (s *slowReader) Read(p []byte) (int, error) {
	time.Sleep(50 * time.Millisecond)
	if len(p) > 512 {
		p = p[:512]
	}
	return s.ReadCloser.Read(p)
}

func TestPullLogsProgress(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := push(t, reg, "progress:1", tim.Busybox(t))
	px := startProxy(t, reg.Host())
	px.setTamper(func(_ string, body io.ReadCloser) io.ReadCloser { return &pacedReader{ReadCloser: body} })
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.InfoLevel)
	s := newTestStore(t, Options{Log: log, Hooks: Hooks{ProgressInterval: 20 * time.Millisecond}})
	if _, err := s.Pull(testContext(t), px.host()+"/progress:1", nil); err != nil {
		t.Fatal(err)
	}
	layer := layerDigests(t, p.img)[0]
	var done, running bool
	for _, e := range hook.AllEntries() {
		if e.Level != logrus.InfoLevel || e.Data["layer"] != layer {
			continue
		}
		if e.Data["rate"] == nil || e.Data["bytes"] == nil {
			t.Errorf("progress entry without rate or bytes: %v", e.Data)
		}
		done = done || e.Message == "layer downloaded"
		running = running || e.Message == "pulling layer"
	}
	if !done || !running {
		t.Fatalf("progress logs: layer downloaded %v, pulling layer %v; entries: %v", done, running, messages(hook.AllEntries()))
	}
}

// pacedReader makes a download last a little over 100ms.
type pacedReader struct {
	io.ReadCloser
	n int
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if p.n < 5 {
		p.n++
		time.Sleep(25 * time.Millisecond)
	}
	return p.ReadCloser.Read(b)
}

func messages(entries []*logrus.Entry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, fmt.Sprintf("%s %v", e.Message, e.Data))
	}
	return out
}

func assertImage(t *testing.T, got, want Image) {
	t.Helper()
	if got.ID != want.ID {
		t.Errorf("ID %s, want %s", got.ID, want.ID)
	}
	if !slices.Equal(got.RepoTags, want.RepoTags) {
		t.Errorf("RepoTags %v, want %v", got.RepoTags, want.RepoTags)
	}
	if !slices.Equal(got.RepoDigests, want.RepoDigests) {
		t.Errorf("RepoDigests %v, want %v", got.RepoDigests, want.RepoDigests)
	}
	if got.Size != want.Size {
		t.Errorf("Size %d, want %d", got.Size, want.Size)
	}
	if g, w := fmt.Sprintf("%+v", got.Config), fmt.Sprintf("%+v", want.Config); g != w {
		t.Errorf("Config\n got %s\nwant %s", g, w)
	}
}

func mustLayers(t *testing.T, img v1.Image) []v1.Layer {
	t.Helper()
	l, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustHash(t *testing.T, s string) v1.Hash {
	t.Helper()
	h, err := v1.NewHash(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
