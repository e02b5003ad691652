//go:build e2e

package e2e

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/minicri/minicri/test/registry"
)

// The pull bench: an image of real files (trees of the host's /usr, one a
// layer), gzip and zstd, pushed to a loopback registry, pulled through
// PullImage with the page cache dropped before each pull. Its floor is
// measured in the same run: the same layer files decompressed and untarred
// by tar, two at a time (the machine's two cores), from local files, no
// network and no digests. Goal: the pull within 1.2 × the floor. Both
// write to a filesystem of their own (benchDisk, bench_disk_test.go).

// benchPullTrees are the layers of the bench image, in order; a tree the
// host lacks is left out.
var benchPullTrees = []string{
	"/usr/include", "/usr/lib/gcc", "/usr/share/doc", "/usr/libexec", "/usr/lib/python3.11",
}

const benchPullRuns = 5

func TestBenchPull(t *testing.T) {
	if os.Getenv("MINICRI_BENCH") == "" {
		t.Skip("benchmarks run with make bench (MINICRI_BENCH=1)")
	}
	benchPull(t)
	printBenchTable()
}

func benchPull(t *testing.T) {
	layers := benchPullLayers(t)
	reg := registry.Start(t, registry.Options{})
	dirs, floor := benchNodeDirs(t)
	// Cleanups run last first: the daemon stops before the disk goes.
	d := StartDaemon(t, append(dirs, WithArgs("--log-level", "info"))...)
	// RemoveImage deletes the unpacked layers, which on a busy disk takes
	// longer than the harness client's call timeout.
	images, err := remote.NewRemoteImageServiceBuilder().WithEndpoint(d.Endpoint).
		WithConnectionTimeout(5 * time.Minute).WithTracerProvider(nil).Build(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		files     []string
		mediaType types.MediaType
		comp      compression.Compression
		tarFlag   string
	}{
		{"gzip", layers.gzip, types.OCILayer, compression.GZip, "--gzip"},
		{"zstd", layers.zstd, types.OCILayerZStd, compression.ZStd, "--zstd"},
	} {
		img := benchPullImage(t, c.files, c.mediaType, c.comp)
		p := pushImage(t, reg, "pullbench:"+c.name, img)
		var pulls, floors, floorSyncs, pullCPU, floorCPU, registryCPU []time.Duration
		for i := 0; i < benchPullRuns; i++ {
			// Interleaved, so that both see the same moments of a busy host.
			before := childrenCPU()
			untar, synced := benchUntarFloor(t, floor, c.files, c.tarFlag)
			floors, floorSyncs = append(floors, untar), append(floorSyncs, synced)
			floorCPU = append(floorCPU, childrenCPU()-before)
			before, beforeRegistry := d.daemonCPU(), treeCPU(reg.Pid())
			pulls = append(pulls, benchPullOnce(t, images, p.ref))
			pullCPU = append(pullCPU, d.daemonCPU()-before)
			registryCPU = append(registryCPU, treeCPU(reg.Pid())-beforeRegistry)
		}
		// The other compression's image has the same diff IDs, so the same
		// unpacked layers: it must find none of this one's.
		if err := images.RemoveImage(context.Background(), &runtime.ImageSpec{Image: p.ref}); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: pulls %v, floors %v (then syncfs %v); CPU: pulls %v, floors %v, registry %v; load %s", c.name, pulls, floors, floorSyncs, pullCPU, floorCPU, registryCPU, strings.TrimSpace(readLoadavg()))
		addBenchRow(benchRow{measure: fmt.Sprintf("floor: untar %d layers (%s, %s), 2 at a time, p50", len(c.files), c.name, layers.size),
			value: p50(floors).Seconds(), unit: "s", goal: floorGoal})
		addBenchRow(benchRow{measure: fmt.Sprintf("PullImage, same layers from a loopback registry (%s), p50", c.name),
			value: p50(pulls).Seconds(), floor: p50(floors).Seconds(), unit: "s", goal: "<= 1.2 x floor"})
		// A pull has its files on disk before it names a layer; the floor
		// leaves them in the page cache. What writing them out costs tar:
		addBenchRow(benchRow{measure: fmt.Sprintf("the same PullImage over the untar and a syncfs of what it wrote (%s), p50", c.name),
			value: p50(pulls).Seconds(), floor: p50(floors).Seconds() + p50(floorSyncs).Seconds(), unit: "s", goal: "reference (the floor with the pull's durability)"})
		// Beside the times, which a busy host moves, the CPU each spent:
		// the daemon's, and tar's with its decompressor's.
		addBenchRow(benchRow{measure: fmt.Sprintf("CPU of that PullImage (%s) over the untar's, p50", c.name),
			value: p50(pullCPU).Seconds(), floor: p50(floorCPU).Seconds(), unit: "s", goal: "reference (what the time ratio is made of)"})
		// The registry serves the pull from the same two cores, which a
		// node's registry does not: CPU the pull's time pays and the
		// floor's does not.
		addBenchRow(benchRow{measure: fmt.Sprintf("CPU of the loopback registry serving it (%s), p50", c.name),
			value: p50(registryCPU).Seconds(), unit: "s", goal: "reference (the bench's, not the pull's)"})
	}
}

// benchPullOnce removes the image (and so its blobs and layers), drops the
// page cache and times one PullImage of ref.
func benchPullOnce(t *testing.T, images internalapi.ImageManagerService, ref string) time.Duration {
	t.Helper()
	if err := images.RemoveImage(context.Background(), &runtime.ImageSpec{Image: ref}); err != nil {
		t.Fatal(err)
	}
	dropCaches(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	begin := time.Now()
	if _, err := images.PullImage(ctx, &runtime.ImageSpec{Image: ref}, nil, nil); err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	return time.Since(begin)
}

// benchUntarFloor times tar extracting the layer files, two at a time,
// each into a directory of its own below parent, after dropping the page
// cache; then the syncfs that puts what it wrote on disk.
func benchUntarFloor(t *testing.T, parent string, files []string, tarFlag string) (untar, synced time.Duration) {
	t.Helper()
	dest, err := os.MkdirTemp(parent, "")
	if err != nil {
		t.Fatal(err)
	}
	dropCaches(t)
	begin := time.Now()
	var g errgroup.Group
	g.SetLimit(2)
	for i, f := range files {
		dir := filepath.Join(dest, fmt.Sprint(i))
		g.Go(func() error {
			if err := os.Mkdir(dir, 0o755); err != nil {
				return err
			}
			out, err := exec.Command("tar", "-x", tarFlag, "-f", f, "-C", dir).CombinedOutput()
			if err != nil {
				return fmt.Errorf("tar -x %s: %v %s", f, err, out)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	untar = time.Since(begin)
	begin = time.Now()
	if err := syncFS(dest); err != nil {
		t.Fatal(err)
	}
	synced = time.Since(begin)
	if err := os.RemoveAll(dest); err != nil {
		t.Fatal(err)
	}
	return untar, synced
}

// syncFS writes out the filesystem that holds dir.
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// dropCaches writes out dirty pages and drops the page cache, so that
// what is timed next reads from disk.
func dropCaches(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("sync").CombinedOutput(); err != nil {
		t.Fatalf("sync: %v %s", err, out)
	}
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err != nil {
		t.Fatalf("drop caches: %v", err)
	}
}

// benchLayerFiles are the bench image's layers as files, both compressions.
type benchLayerFiles struct {
	gzip, zstd []string
	size       string // unpacked, "612 MB"
}

// benchPullLayers writes each tree of benchPullTrees as a tar, gzip and
// zstd compressed (the libraries' default levels), two trees at a time.
func benchPullLayers(t *testing.T) benchLayerFiles {
	t.Helper()
	dir := t.TempDir()
	var trees []string
	for _, tree := range benchPullTrees {
		if fi, err := os.Stat(tree); err == nil && fi.IsDir() {
			trees = append(trees, tree)
		}
	}
	if len(trees) < 2 {
		t.Skipf("the host has %d of the bench's trees %v", len(trees), benchPullTrees)
	}
	out := benchLayerFiles{gzip: make([]string, len(trees)), zstd: make([]string, len(trees))}
	sizes := make([]int64, len(trees))
	var g errgroup.Group
	g.SetLimit(2)
	for i, tree := range trees {
		out.gzip[i] = filepath.Join(dir, fmt.Sprintf("%d.tar.gz", i))
		out.zstd[i] = filepath.Join(dir, fmt.Sprintf("%d.tar.zst", i))
		g.Go(func() (err error) {
			sizes[i], err = writeTreeLayer(tree, out.gzip[i], out.zstd[i])
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, s := range sizes {
		total += s
	}
	out.size = fmt.Sprintf("%d MB", total/1e6)
	return out
}

// writeTreeLayer tars tree (its names below / kept, "usr/include/…") into
// a gzip file and a zstd file at once, and returns the bytes of its files.
func writeTreeLayer(tree, gzPath, zstPath string) (int64, error) {
	gzFile, err := os.Create(gzPath)
	if err != nil {
		return 0, err
	}
	defer gzFile.Close()
	zstFile, err := os.Create(zstPath)
	if err != nil {
		return 0, err
	}
	defer zstFile.Close()
	gz := gzip.NewWriter(gzFile)
	zw, err := zstd.NewWriter(zstFile, zstd.WithEncoderConcurrency(1))
	if err != nil {
		return 0, err
	}
	tw := tar.NewWriter(io.MultiWriter(gz, zw))
	var size int64
	err = filepath.WalkDir(tree, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case !fi.Mode().IsRegular() && !fi.IsDir():
			return nil // sockets, fifos: not in images
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = strings.TrimPrefix(p, "/")
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.Copy(tw, f)
		size += n
		return err
	})
	if err != nil {
		return 0, err
	}
	for _, c := range []io.Closer{tw, gz, zw} {
		if err := c.Close(); err != nil {
			return 0, err
		}
	}
	return size, nil
}

// benchPullImage is an image of the layer files.
func benchPullImage(t *testing.T, files []string, mt types.MediaType, comp compression.Compression) v1.Image {
	t.Helper()
	img := empty.Image
	for _, f := range files {
		l, err := tarball.LayerFromFile(f, tarball.WithMediaType(mt), tarball.WithCompression(comp))
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", goruntime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}
