// Package testimage builds small OCI images in memory for tests, from Debian's
// static /bin/busybox, and pushes them to a registry or writes them as
// archives. Images are deterministic: the same options give the same digests.
//
//	img := testimage.Busybox(t, testimage.WithCmd("sleep", "3600"))
//	digest := testimage.Push(t, img, reg.Host()+"/busybox:latest")
package testimage

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// BusyboxPath is the static busybox the images are built from (Debian busybox-static).
const BusyboxPath = "/bin/busybox"

// Epoch is the mtime of every entry and the creation time of every image,
// fixed so that digests do not change from run to run.
var Epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// Applets are the busybox applets linked in /bin of Busybox.
var Applets = []string{
	"[", "ash", "awk", "base64", "basename", "cat", "chmod", "chown", "cp", "cut",
	"date", "dd", "df", "dirname", "du", "echo", "env", "false", "find", "free",
	"grep", "head", "hostname", "id", "ip", "kill", "ln", "ls", "md5sum", "mkdir",
	"mkfifo", "mknod", "mount", "mv", "nc", "nproc", "nslookup", "pidof", "ping",
	"printf", "ps", "pwd", "readlink", "realpath", "rm", "rmdir", "sed", "seq",
	"setsid", "sh", "sha256sum", "sleep", "sort", "stat", "stty", "sync", "tail",
	"tee", "test", "timeout", "top", "touch", "tr", "true", "umount", "uname",
	"uniq", "usleep", "wc", "wget", "whoami", "xargs", "yes",
}

// Entry is one tar entry of a layer: a header and, for regular files, a body.
type Entry struct {
	Header tar.Header
	Body   []byte
}

// Dir is a directory entry.
func Dir(name string, mode int64) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode}}
}

// File is a regular file entry.
func File(name, body string, mode int64) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body))}, Body: []byte(body)}
}

// Symlink is a symbolic link entry name → target.
func Symlink(name, target string) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}}
}

// Hardlink is a hard link entry name → target (a path in the same layer).
func Hardlink(name, target string) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target}}
}

// CharDevice is a character device node entry.
func CharDevice(name string, major, minor int64) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeChar, Name: name, Mode: 0o666, Devmajor: major, Devminor: minor}}
}

// Whiteout deletes path (from the layers below) in the Docker/OCI layer format.
func Whiteout(path string) Entry {
	dir, base := splitPath(path)
	return File(dir+".wh."+base, "", 0o644)
}

// Opaque hides everything the layers below have in dir.
func Opaque(dir string) Entry {
	return File(dir+"/.wh..wh..opq", "", 0o644)
}

// Layer builds a gzip layer from entries, in order. Entries get Epoch as mtime
// and root ownership unless their header says otherwise.
func Layer(t testing.TB, entries ...Entry) v1.Layer {
	t.Helper()
	raw, err := tarBytes(entries)
	if err != nil {
		t.Fatalf("testimage: build layer: %v", err)
	}
	return layerFromTar(t, raw)
}

// Option changes the image config or format of Busybox, MultiLayer and Image.
type Option func(*options)

type options struct {
	edits []func(*v1.Config)
	oci   bool
}

// WithConfig edits the image config (anything the helpers below do not cover).
func WithConfig(edit func(*v1.Config)) Option {
	return func(o *options) { o.edits = append(o.edits, edit) }
}

// WithEntrypoint sets the config's Entrypoint.
func WithEntrypoint(args ...string) Option {
	return WithConfig(func(c *v1.Config) { c.Entrypoint = args })
}

// WithCmd sets the config's Cmd.
func WithCmd(args ...string) Option { return WithConfig(func(c *v1.Config) { c.Cmd = args }) }

// WithEnv appends KEY=VALUE pairs to the config's Env.
func WithEnv(env ...string) Option {
	return WithConfig(func(c *v1.Config) { c.Env = append(c.Env, env...) })
}

// WithWorkingDir sets the config's WorkingDir.
func WithWorkingDir(dir string) Option {
	return WithConfig(func(c *v1.Config) { c.WorkingDir = dir })
}

// WithUser sets the config's User ("1000", "app", "1000:1000").
func WithUser(user string) Option { return WithConfig(func(c *v1.Config) { c.User = user }) }

// WithStopSignal sets the config's StopSignal ("SIGINT").
func WithStopSignal(sig string) Option {
	return WithConfig(func(c *v1.Config) { c.StopSignal = sig })
}

// WithLabels adds labels to the config.
func WithLabels(labels map[string]string) Option {
	return WithConfig(func(c *v1.Config) {
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		for k, v := range labels {
			c.Labels[k] = v
		}
	})
}

// OCI makes the image use OCI media types instead of Docker schema 2 ones.
func OCI() Option { return func(o *options) { o.oci = true } }

// Image builds a linux image of the machine's architecture from layers
// (bottom first). The base config has PATH set and Cmd ["sh"].
func Image(t testing.TB, layers []v1.Layer, opts ...Option) v1.Image {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	cfg := v1.Config{
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Cmd: []string{"sh"},
	}
	for _, edit := range o.edits {
		edit(&cfg)
	}
	base := empty.Image
	if o.oci {
		base = mutate.MediaType(base, types.OCIManifestSchema1)
		base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	}
	cf, err := base.ConfigFile()
	if err != nil {
		t.Fatalf("testimage: %v", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: Epoch}
	cf.Config = cfg
	img, err := mutate.ConfigFile(base, cf)
	if err != nil {
		t.Fatalf("testimage: set config: %v", err)
	}
	for _, l := range layers {
		add := mutate.Addendum{Layer: l}
		if o.oci {
			add.MediaType = types.OCILayer
		}
		if img, err = mutate.Append(img, add); err != nil {
			t.Fatalf("testimage: append layer: %v", err)
		}
	}
	return img
}

// Busybox is a one-layer image: /bin/busybox with the Applets linked next to
// it, /usr/bin/env, /etc/passwd with root and app (uid 1000), /etc/group,
// /tmp (1777), /root, /home/app.
func Busybox(t testing.TB, opts ...Option) v1.Image {
	t.Helper()
	return Image(t, []v1.Layer{BusyboxLayer(t)}, opts...)
}

// MultiLayer is Busybox plus a layer that exercises the layer format:
//
//   - /data/gone (in the busybox layer below) is whited out;
//   - /opq is opaque: /opq/old (below) is hidden, /opq/new is shown;
//   - /data/link is a symlink to /etc/motd, /data/hard a hard link to /data/file;
//   - /data/null is a character device 1:3, /data/suid a setuid file of uid 1000.
//
// The first layer is the busybox layer with /data/gone, /data/keep and /opq/old added.
func MultiLayer(t testing.TB, opts ...Option) v1.Image {
	t.Helper()
	top := Layer(t,
		Dir("data", 0o755),
		Whiteout("data/gone"),
		Dir("opq", 0o755),
		Opaque("opq"),
		File("opq/new", "new\n", 0o644),
		File("etc/motd", "hello from the top layer\n", 0o644),
		Symlink("data/link", "/etc/motd"),
		File("data/file", "linked\n", 0o640),
		Hardlink("data/hard", "data/file"),
		CharDevice("data/null", 1, 3),
		Entry{Header: tar.Header{Typeflag: tar.TypeReg, Name: "data/suid", Mode: 0o4755, Uid: 1000, Gid: 1000, Size: 2}, Body: []byte("#\n")},
	)
	return Image(t, []v1.Layer{multiBaseLayer(t), top}, opts...)
}

// Layers built from /bin/busybox are built once per test binary: compressing
// two megabytes for every test would cost more than the tests themselves.
var (
	busyboxOnce, multiBaseOnce    sync.Once
	busyboxLayer, multiBase       v1.Layer
	busyboxErr, multiBaseLayerErr error
)

// BusyboxLayer is the layer of Busybox. The test is skipped when
// /bin/busybox is missing.
func BusyboxLayer(t testing.TB) v1.Layer {
	t.Helper()
	busyboxOnce.Do(func() { busyboxLayer, busyboxErr = busyboxLayerWith(nil) })
	if busyboxErr != nil {
		t.Skipf("testimage: cannot build the busybox layer: %v", busyboxErr)
	}
	return busyboxLayer
}

func multiBaseLayer(t testing.TB) v1.Layer {
	t.Helper()
	multiBaseOnce.Do(func() {
		multiBase, multiBaseLayerErr = busyboxLayerWith([]Entry{
			Dir("data", 0o755),
			File("data/gone", "gone\n", 0o644),
			File("data/keep", "keep\n", 0o644),
			Dir("opq", 0o755),
			File("opq/old", "old\n", 0o644),
		})
	})
	if multiBaseLayerErr != nil {
		t.Skipf("testimage: cannot build the busybox layer: %v", multiBaseLayerErr)
	}
	return multiBase
}

// busyboxLayerWith builds the busybox file tree with extra entries at the end.
func busyboxLayerWith(extra []Entry) (v1.Layer, error) {
	bin, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return nil, err
	}
	entries := []Entry{
		Dir("bin", 0o755), Dir("dev", 0o755), Dir("etc", 0o755), Dir("home", 0o755),
		{Header: tar.Header{Typeflag: tar.TypeDir, Name: "home/app/", Mode: 0o755, Uid: 1000, Gid: 1000}},
		Dir("proc", 0o755), Dir("root", 0o700), Dir("sys", 0o755), Dir("tmp", 0o1777),
		Dir("usr", 0o755), Dir("usr/bin", 0o755), Dir("var", 0o755),
		{Header: tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin))}, Body: bin},
		File("etc/passwd", "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n", 0o644),
		File("etc/group", "root:x:0:\napp:x:1000:\nnogroup:x:65534:\n", 0o644),
		Symlink("usr/bin/env", "/bin/busybox"),
	}
	for _, a := range Applets {
		entries = append(entries, Symlink("bin/"+a, "busybox"))
	}
	raw, err := tarBytes(append(entries, extra...))
	if err != nil {
		return nil, err
	}
	return gzipLayer(raw)
}

func tarBytes(entries []Entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.Header
		if h.ModTime.IsZero() {
			h.ModTime = Epoch
		}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.Body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func layerFromTar(t testing.TB, raw []byte) v1.Layer {
	t.Helper()
	l, err := gzipLayer(raw)
	if err != nil {
		t.Fatalf("testimage: layer: %v", err)
	}
	return l
}

func gzipLayer(raw []byte) (v1.Layer, error) {
	open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil }
	return tarball.LayerFromOpener(open, tarball.WithCompressedCaching)
}

func splitPath(p string) (dir, base string) {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[:i+1], p[i+1:]
		}
	}
	return "", p
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
