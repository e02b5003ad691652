//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sys/unix"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// pushedImage is an image in a test registry.
type pushedImage struct {
	ref    string // "127.0.0.1:PORT/e2e/NAME:TAG"
	digest string // of the manifest
	id     string // of the config: the image ID the CRI reports
	img    v1.Image
}

// digestRef is the image's reference by digest, in the same repository.
func (p pushedImage) digestRef() string {
	repo := p.ref[:strings.LastIndex(p.ref, ":")]
	return repo + "@" + p.digest
}

// pushImage pushes img to reg as e2e/REPOTAG.
func pushImage(t *testing.T, reg *registry.Registry, repoTag string, img v1.Image, opts ...remote.Option) pushedImage {
	t.Helper()
	ref := reg.Host() + "/e2e/" + repoTag
	return pushedImage{ref: ref, digest: testimage.Push(t, img, ref, opts...), id: testimage.ConfigDigest(t, img), img: img}
}

// imageSize is the size the CRI reports for img: its config and its
// compressed layers.
func imageSize(t *testing.T, img v1.Image) uint64 {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	size := m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	return uint64(size)
}

// pullErr pulls ref with auth (may be nil) and returns the error, for tests
// that expect one.
func (d *Daemon) pullErr(ref string, auth *runtime.AuthConfig) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return d.Images.PullImage(ctx, &runtime.ImageSpec{Image: ref}, auth, nil)
}

// imageStatus returns the status of ref (nil when the daemon has no such
// image), failing the test on an error.
func (d *Daemon) imageStatus(t *testing.T, ref string, verbose bool) *runtime.ImageStatusResponse {
	t.Helper()
	resp, err := d.Images.ImageStatus(context.Background(), &runtime.ImageSpec{Image: ref}, verbose)
	if err != nil {
		t.Fatalf("ImageStatus %s: %v", ref, err)
	}
	return resp
}

// listImages lists the daemon's images, those filter names only if it is not "".
func (d *Daemon) listImages(t *testing.T, filter string) []*runtime.Image {
	t.Helper()
	var f *runtime.ImageFilter
	if filter != "" {
		f = &runtime.ImageFilter{Image: &runtime.ImageSpec{Image: filter}}
	}
	images, err := d.Images.ListImages(context.Background(), f)
	if err != nil {
		t.Fatalf("ListImages %q: %v", filter, err)
	}
	return images
}

// imageIDs lists the IDs of images.
func imageIDs(images []*runtime.Image) []string {
	ids := make([]string, 0, len(images))
	for _, img := range images {
		ids = append(ids, img.GetId())
	}
	return ids
}

// fsUsage is the daemon's one image filesystem, as ImageFsInfo reports it.
func (d *Daemon) fsUsage(t *testing.T) *runtime.FilesystemUsage {
	t.Helper()
	resp, err := d.Images.ImageFsInfo(context.Background())
	if err != nil {
		t.Fatalf("ImageFsInfo: %v", err)
	}
	if n := len(resp.GetImageFilesystems()); n != 1 {
		t.Fatalf("ImageFsInfo: %d image filesystems, want 1", n)
	}
	return resp.GetImageFilesystems()[0]
}

// imageCLI runs `minicri image SUB ARGS... DAEMON-FLAGS`: the subcommand with
// the daemon's own flags, so that it opens the daemon's store. It returns the
// exit code, stdout and stderr.
func (d *Daemon) imageCLI(t *testing.T, sub string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	argv := append(append([]string{"image", sub}, args...), d.args...)
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "minicri"), argv...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("minicri %v did not finish in 20 s:\n%s%s", argv, out.String(), errOut.String())
	}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		return exitErr.ExitCode(), out.String(), errOut.String()
	case err != nil:
		t.Fatalf("minicri %v: %v", argv, err)
	}
	return 0, out.String(), errOut.String()
}

// filesBelow lists the regular files and symlinks below dir, relative to it.
func filesBelow(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}

// basicAuth is a registry credential for pushing.
func basicAuth(user, password string) remote.Option {
	return remote.WithAuth(&authn.Basic{Username: user, Password: password})
}

// cuttingProxy is a reverse proxy on 127.0.0.1 in front of a registry that,
// when armed, lets `after` bytes of one blob through and then calls cut
// (which stops the registry) and drops the connection.
type cuttingProxy struct {
	srv *httptest.Server

	mu    sync.Mutex
	blob  string // digest of the blob to cut; "" disarms
	after int
	cut   func()
}

func startCuttingProxy(t *testing.T, upstreamHost string) *cuttingProxy {
	t.Helper()
	p := &cuttingProxy{}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: upstreamHost})
	rp.ErrorLog = log.New(io.Discard, "", 0) // the cut connection is the point
	rp.ModifyResponse = func(resp *http.Response) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.blob != "" && resp.Request.Method == http.MethodGet && resp.StatusCode == http.StatusOK &&
			strings.HasSuffix(resp.Request.URL.Path, "/blobs/"+p.blob) {
			resp.Body = &cutBody{ReadCloser: resp.Body, after: p.after, cut: p.cut}
		}
		return nil
	}
	p.srv = httptest.NewServer(rp)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *cuttingProxy) host() string { return strings.TrimPrefix(p.srv.URL, "http://") }

// arm makes the next downloads of blob stop after `after` bytes; disarm with blob "".
func (p *cuttingProxy) arm(blob string, after int, cut func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blob, p.after, p.cut = blob, after, cut
}

// cutBody passes `after` bytes, then calls cut once and fails like a dropped connection.
type cutBody struct {
	io.ReadCloser
	after int
	cut   func()
	once  sync.Once
}

func (c *cutBody) Read(b []byte) (int, error) {
	if c.after <= 0 {
		c.once.Do(c.cut)
		return 0, io.ErrUnexpectedEOF
	}
	if len(b) > c.after {
		b = b[:c.after]
	}
	n, err := c.ReadCloser.Read(b)
	c.after -= n
	return n, err
}

// layerDigest is the digest of img's layer i.
func layerDigest(t *testing.T, img v1.Image, i int) string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d, err := layers[i].Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// registryTransport trusts reg's self-signed certificate, for pushing to it.
func registryTransport(reg *registry.Registry) remote.Option {
	return remote.WithTransport(reg.Transport())
}

// refusedHost returns "127.0.0.1:PORT" where connections are refused for the
// whole test: the port is bound but never listened on, so no other process
// can take it meanwhile (a closed listener's port could be reused).
func refusedHost(t *testing.T) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
}
