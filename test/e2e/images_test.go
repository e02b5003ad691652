//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/minicri/minicri/test/registry"
	"github.com/minicri/minicri/test/testimage"
)

// TestPullByTagAndDigest pulls one image by tag and another by digest and
// checks what ImageStatus and ListImages say of them, field by field.
func TestPullByTagAndDigest(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	byUID := pushImage(t, reg, "uid:latest", testimage.Busybox(t, testimage.WithUser("1000")))
	byName := pushImage(t, reg, "named:v1", testimage.Busybox(t, testimage.WithUser("app")))
	d := StartDaemon(t)

	if got := d.pull(t, byUID.ref); got != byUID.id {
		t.Fatalf("PullImage %s = %s, want the config digest %s", byUID.ref, got, byUID.id)
	}
	if got := d.pull(t, byName.digestRef()); got != byName.id {
		t.Fatalf("PullImage %s = %s, want the config digest %s", byName.digestRef(), got, byName.id)
	}

	// Asked without its tag, the image is found under :latest.
	st := d.imageStatus(t, reg.Host()+"/e2e/uid", false).GetImage()
	want := &runtime.Image{
		Id:          byUID.id,
		RepoTags:    []string{byUID.ref},
		RepoDigests: []string{byUID.digestRef()},
		Size:        imageSize(t, byUID.img),
		Uid:         &runtime.Int64Value{Value: 1000},
		Spec:        &runtime.ImageSpec{Image: byUID.id},
	}
	if diff := imageDiff(st, want); diff != "" {
		t.Errorf("ImageStatus of the image pulled by tag: %s", diff)
	}
	// Pulled by digest only: no tag, and the user is a name.
	st = d.imageStatus(t, byName.digestRef(), false).GetImage()
	want = &runtime.Image{
		Id:          byName.id,
		RepoDigests: []string{byName.digestRef()},
		Size:        imageSize(t, byName.img),
		Username:    "app",
		Spec:        &runtime.ImageSpec{Image: byName.id},
	}
	if diff := imageDiff(st, want); diff != "" {
		t.Errorf("ImageStatus of the image pulled by digest: %s", diff)
	}
	if got := imageIDs(d.listImages(t, "")); !slices.Equal(sorted(got), sorted([]string{byUID.id, byName.id})) {
		t.Errorf("ListImages = %v, want both images", got)
	}
}

// imageDiff compares the fields of a CRI image that the tests check.
func imageDiff(got, want *runtime.Image) string {
	if got == nil {
		return "no image"
	}
	var diffs []string
	check := func(field string, g, w any) {
		if fmt.Sprint(g) != fmt.Sprint(w) {
			diffs = append(diffs, fmt.Sprintf("%s = %v, want %v", field, g, w))
		}
	}
	check("id", got.GetId(), want.GetId())
	check("repo tags", got.GetRepoTags(), want.GetRepoTags())
	check("repo digests", got.GetRepoDigests(), want.GetRepoDigests())
	check("size", got.GetSize(), want.GetSize())
	check("uid", got.GetUid(), want.GetUid())
	check("username", got.GetUsername(), want.GetUsername())
	check("spec", got.GetSpec().GetImage(), want.GetSpec().GetImage())
	return strings.Join(diffs, "; ")
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestImageStatusAndListFilters: ImageStatus of an unknown image is an empty
// answer, verbose adds the image as JSON, and the ListImages filter takes
// every name ImageStatus takes.
func TestImageStatusAndListFilters(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := pushImage(t, reg, "filters:v1", testimage.Busybox(t, testimage.WithEnv("E2E=1")))
	other := pushImage(t, reg, "other:v1", testimage.Busybox(t, testimage.WithCmd("true")))
	d := StartDaemon(t)
	d.pull(t, p.ref)
	d.pull(t, other.ref)

	for _, name := range []string{reg.Host() + "/e2e/nothing:v1", "sha256:" + strings.Repeat("0", 64), "busybox"} {
		resp, err := d.Images.ImageStatus(context.Background(), &runtime.ImageSpec{Image: name}, true)
		if err != nil || resp.GetImage() != nil || len(resp.GetInfo()) != 0 {
			t.Errorf("ImageStatus of unknown %s = %v, %v; want an empty answer and no error", name, resp, err)
		}
	}

	resp := d.imageStatus(t, p.ref, true)
	var info struct {
		ID             string `json:"id"`
		ManifestDigest string `json:"manifestDigest"`
		Platform       string `json:"platform"`
		Config         struct {
			Env []string `json:"env"`
		} `json:"config"`
		Layers []struct {
			Digest string `json:"digest"`
		} `json:"layers"`
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil {
		t.Fatalf("verbose info %q: %v", resp.GetInfo(), err)
	}
	if info.ID != p.id || info.ManifestDigest != p.digest || !strings.HasPrefix(info.Platform, "linux/") ||
		!slices.Contains(info.Config.Env, "E2E=1") || len(info.Layers) != 1 || info.Layers[0].Digest != layerDigest(t, p.img, 0) {
		t.Errorf("verbose info = %+v, want the image's ID, manifest, platform, env and layer", info)
	}

	hexID := strings.TrimPrefix(p.id, "sha256:")
	for _, filter := range []string{p.ref, p.digestRef(), p.id, hexID, hexID[:12]} {
		if got := imageIDs(d.listImages(t, filter)); !slices.Equal(got, []string{p.id}) {
			t.Errorf("ListImages filter %q = %v, want [%s]", filter, got, p.id)
		}
	}
	if got := d.listImages(t, reg.Host()+"/e2e/filters:v2"); len(got) != 0 {
		t.Errorf("ListImages filter on an unknown tag = %v, want none", imageIDs(got))
	}
}

// TestPullThroughMirrorWithUpstreamStopped pulls an image of a registry that
// is down through its mirrors: the first mirror is down too and skipped; the
// image is named after the registry, never the mirror.
func TestPullThroughMirrorWithUpstreamStopped(t *testing.T) {
	upstream := registry.Start(t, registry.Options{})
	mirror := registry.Start(t, registry.Options{})
	img := testimage.Busybox(t)
	p := pushImage(t, upstream, "mirrored:v1", img)
	pushImage(t, mirror, "mirrored:v1", img)
	upstream.Stop()

	d := StartDaemon(t, WithConfig(fmt.Sprintf("[image.registries.%q]\nmirrors = [%q, %q]\n",
		upstream.Host(), "http://"+refusedHost(t), mirror.URL())))
	if got := d.pull(t, p.ref); got != p.id {
		t.Fatalf("PullImage through the mirror = %s, want %s", got, p.id)
	}
	st := d.imageStatus(t, p.ref, false).GetImage()
	if diff := imageDiff(st, &runtime.Image{Id: p.id, RepoTags: []string{p.ref}, RepoDigests: []string{p.digestRef()},
		Size: imageSize(t, img), Uid: st.GetUid(), Spec: &runtime.ImageSpec{Image: p.id}}); diff != "" {
		t.Errorf("image pulled through a mirror: %s", diff)
	}
}

// TestPullInsecureTLSRegistry: a registry with a self-signed certificate is
// refused, unless the daemon's config marks it insecure.
func TestPullInsecureTLSRegistry(t *testing.T) {
	reg := registry.Start(t, registry.Options{TLS: true})
	p := pushImage(t, reg, "tls:v1", testimage.Busybox(t), registryTransport(reg))

	strict := StartDaemon(t)
	_, err := strict.pullErr(p.ref, nil)
	if err == nil || !strings.Contains(err.Error(), "certificate") || !strings.Contains(err.Error(), p.ref) {
		t.Fatalf("pull from a self-signed registry not marked insecure: %v; want a certificate error naming the image", err)
	}
	if got := strict.listImages(t, ""); len(got) != 0 {
		t.Fatalf("images after a refused pull: %v", imageIDs(got))
	}

	insecure := StartDaemon(t, WithConfig(fmt.Sprintf("[image.registries.%q]\ninsecure = true\n", reg.Host())))
	if got := insecure.pull(t, p.ref); got != p.id {
		t.Fatalf("PullImage from the insecure registry = %s, want %s", got, p.id)
	}
}

// TestPullWithBasicAuth sends the CRI AuthConfig of the kubelet: no or wrong
// credentials are Unauthenticated and keep nothing; right ones pull, as user
// and password or as the base64 auth field.
func TestPullWithBasicAuth(t *testing.T) {
	reg := registry.Start(t, registry.Options{Users: map[string]string{"e2e": "s3cret"}})
	p := pushImage(t, reg, "private:v1", testimage.Busybox(t), basicAuth("e2e", "s3cret"))
	d := StartDaemon(t)

	refused := []struct {
		name string
		auth *runtime.AuthConfig
	}{
		{"no credentials", nil},
		{"wrong password", &runtime.AuthConfig{Username: "e2e", Password: "wrong"}},
		{"unknown user", &runtime.AuthConfig{Auth: base64.StdEncoding.EncodeToString([]byte("nobody:s3cret"))}},
	}
	for _, c := range refused {
		_, err := d.pullErr(p.ref, c.auth)
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), p.ref) {
			t.Errorf("%s: pull = %v; want Unauthenticated naming the image", c.name, err)
		}
	}
	if got := d.listImages(t, ""); len(got) != 0 {
		t.Fatalf("images after refused pulls: %v", imageIDs(got))
	}

	accepted := []struct {
		name string
		auth *runtime.AuthConfig
	}{
		{"user and password", &runtime.AuthConfig{Username: "e2e", Password: "s3cret"}},
		{"auth field", &runtime.AuthConfig{Auth: base64.StdEncoding.EncodeToString([]byte("e2e:s3cret"))}},
	}
	for _, c := range accepted {
		id, err := d.pullErr(p.ref, c.auth)
		if err != nil || id != p.id {
			t.Errorf("%s: pull = %s, %v; want %s", c.name, id, err, p.id)
		}
	}
}

// TestPullErrorsNameTheReference: each failed pull answers a code the
// kubelet can act on and names the image.
func TestPullErrorsNameTheReference(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := pushImage(t, reg, "exists:v1", testimage.Busybox(t))
	d := StartDaemon(t)
	cases := []struct {
		name, ref string
		code      codes.Code
	}{
		{"not a reference", "Not//A Reference", codes.InvalidArgument},
		{"upper case repository", reg.Host() + "/E2E/App:v1", codes.InvalidArgument},
		{"unknown repository", reg.Host() + "/e2e/nothing:v1", codes.NotFound},
		{"unknown tag", reg.Host() + "/e2e/exists:v2", codes.NotFound},
		{"unknown digest", reg.Host() + "/e2e/exists@sha256:" + strings.Repeat("1", 64), codes.NotFound},
		// .onion names are never sent to a DNS server: the lookup fails here.
		{"unknown registry host", "no-such-registry.onion/e2e/app:v1", codes.NotFound},
		{"registry down", refusedHost(t) + "/e2e/app:v1", codes.Unavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := d.pullErr(c.ref, nil)
			if status.Code(err) != c.code || !strings.Contains(err.Error(), c.ref) {
				t.Errorf("pull %s = %v; want %v naming the reference", c.ref, err, c.code)
			}
		})
	}
	_, err := d.pullErr("", nil)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "image") {
		t.Errorf("pull of an empty reference = %v, want InvalidArgument naming the field", err)
	}
	if got := d.listImages(t, ""); len(got) != 0 {
		t.Errorf("images after failed pulls: %v", imageIDs(got))
	}
	if got := d.pull(t, p.ref); got != p.id {
		t.Errorf("the registry's real image: pulled %s, want %s", got, p.id)
	}
}

// TestImageRemoveIsIdempotent removes an image by tag (all its names go),
// then again, then a name that never existed: all succeed.
func TestImageRemoveIsIdempotent(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	img := testimage.Busybox(t)
	p := pushImage(t, reg, "rm:v1", img)
	second := pushImage(t, reg, "rm:v2", img)
	d := StartDaemon(t)
	d.pull(t, p.ref)
	d.pull(t, second.ref)
	if tags := d.imageStatus(t, p.id, false).GetImage().GetRepoTags(); len(tags) != 2 {
		t.Fatalf("repo tags = %v, want both tags on one image", tags)
	}

	ctx := context.Background()
	for _, ref := range []string{p.ref, p.ref, p.id, reg.Host() + "/e2e/never:v1"} {
		if err := d.Images.RemoveImage(ctx, &runtime.ImageSpec{Image: ref}); err != nil {
			t.Fatalf("RemoveImage %s: %v", ref, err)
		}
	}
	for _, ref := range []string{p.ref, second.ref, p.id} {
		if st := d.imageStatus(t, ref, false); st.GetImage() != nil {
			t.Errorf("ImageStatus %s after removal = %v, want nothing", ref, st.GetImage())
		}
	}
	if got := d.listImages(t, ""); len(got) != 0 {
		t.Errorf("ListImages after removal = %v", imageIDs(got))
	}
}

// TestImageInUseIsNotRemoved: an image a container was created from cannot
// be removed; once the container is gone it can.
func TestImageInUseIsNotRemoved(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := pushImage(t, reg, "inuse:v1", testimage.Busybox(t))
	d := StartDaemon(t)
	d.pull(t, p.ref)
	podCfg := d.hostNetworkPod("inuse")
	pod := d.runPod(t, podCfg)
	ctr := d.createContainer(t, pod, podCfg, containerConfig("user", p.ref, "true"))

	ctx := context.Background()
	err := d.Images.RemoveImage(ctx, &runtime.ImageSpec{Image: p.ref})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), p.id) || !strings.Contains(err.Error(), ctr) {
		t.Fatalf("RemoveImage of an image in use = %v; want FailedPrecondition naming the image %s and container %s", err, p.id, ctr)
	}
	if st := d.imageStatus(t, p.ref, false).GetImage(); st.GetId() != p.id || len(st.GetRepoTags()) != 1 {
		t.Fatalf("after a refused removal the image is %v, want it whole", st)
	}

	if err := d.Runtime.RemoveContainer(ctx, ctr); err != nil {
		t.Fatal(err)
	}
	if err := d.Images.RemoveImage(ctx, &runtime.ImageSpec{Image: p.ref}); err != nil {
		t.Fatalf("RemoveImage once the container is gone: %v", err)
	}
	if st := d.imageStatus(t, p.ref, false); st.GetImage() != nil {
		t.Fatalf("image still there after removal: %v", st.GetImage())
	}
}

// TestImageFsInfoFollowsPullAndRemove: the bytes and inodes the image
// filesystem reports grow with a pull and shrink with a removal.
func TestImageFsInfoFollowsPullAndRemove(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := pushImage(t, reg, "fs:v1", testimage.Busybox(t))
	d := StartDaemon(t)

	before := d.fsUsage(t)
	if mp := before.GetFsId().GetMountpoint(); mp == "" || !strings.HasPrefix(d.Root, strings.TrimSuffix(mp, "/")+"/") && mp != "/" {
		t.Errorf("mountpoint %q does not hold the root %s", mp, d.Root)
	}
	d.pull(t, p.ref)
	pulled := d.fsUsage(t)
	// The layer is stored twice: the compressed blob and the unpacked files.
	if grew := int64(pulled.GetUsedBytes().GetValue()) - int64(before.GetUsedBytes().GetValue()); grew < int64(imageSize(t, p.img)) {
		t.Errorf("used bytes grew by %d after a pull of %d bytes", grew, imageSize(t, p.img))
	}
	if grew := int64(pulled.GetInodesUsed().GetValue()) - int64(before.GetInodesUsed().GetValue()); grew < int64(len(testimage.Applets)) {
		t.Errorf("inodes grew by %d after a pull of an image of %d+ files", grew, len(testimage.Applets))
	}

	if err := d.Images.RemoveImage(context.Background(), &runtime.ImageSpec{Image: p.ref}); err != nil {
		t.Fatal(err)
	}
	removed := d.fsUsage(t)
	if removed.GetUsedBytes().GetValue() > before.GetUsedBytes().GetValue()+64<<10 ||
		removed.GetInodesUsed().GetValue() > before.GetInodesUsed().GetValue()+4 {
		t.Errorf("after removal: %d bytes, %d inodes; before the pull: %d bytes, %d inodes",
			removed.GetUsedBytes().GetValue(), removed.GetInodesUsed().GetValue(),
			before.GetUsedBytes().GetValue(), before.GetInodesUsed().GetValue())
	}
	if removed.GetTimestamp() <= before.GetTimestamp() {
		t.Errorf("timestamp %d not after %d", removed.GetTimestamp(), before.GetTimestamp())
	}
}

// TestPullRefusesHostileLayers pulls images whose layer tries to write
// outside itself: each pull fails naming the entry, no image appears, and
// nothing is written where the layer pointed.
func TestPullRefusesHostileLayers(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	d := StartDaemon(t)
	outside := t.TempDir() // where a successful escape would write
	up := strings.Repeat("../", 32)
	cases := []struct {
		name    string
		entries []testimage.Entry
		entry   string // the entry the error must name
	}{
		{"dot-dot to the store", []testimage.Entry{testimage.File("../../etc/x", "pwned\n", 0o644)}, "../../etc/x"},
		{"dot-dot to the host", []testimage.Entry{testimage.File(up+outside[1:]+"/dotdot", "pwned\n", 0o644)}, "dotdot"},
		{"absolute path", []testimage.Entry{testimage.File(outside+"/absolute", "pwned\n", 0o644)}, "absolute"},
		{"through an absolute symlink", []testimage.Entry{
			testimage.Symlink("escape", outside),
			testimage.File("escape/through-symlink", "pwned\n", 0o644),
		}, "escape/through-symlink"},
		{"through a relative symlink", []testimage.Entry{
			testimage.Symlink("up", strings.TrimSuffix(up, "/")),
			testimage.File("up"+outside+"/through-relative", "pwned\n", 0o644),
		}, "through-relative"},
		{"hard link out of the layer", []testimage.Entry{testimage.Hardlink("passwd", up+"etc/passwd")}, "passwd"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img := testimage.Image(t, []v1.Layer{testimage.Layer(t, c.entries...)})
			p := pushImage(t, reg, fmt.Sprintf("hostile%d:v1", i), img)
			_, err := d.pullErr(p.ref, nil)
			if err == nil || !strings.Contains(err.Error(), c.entry) || !strings.Contains(err.Error(), p.ref) {
				t.Fatalf("pull = %v; want a refusal naming the image and the entry %q", err, c.entry)
			}
			if st := d.imageStatus(t, p.ref, false); st.GetImage() != nil {
				t.Fatalf("a refused image is listed: %v", st.GetImage())
			}
		})
	}
	if got := d.listImages(t, ""); len(got) != 0 {
		t.Errorf("images after refused pulls: %v", imageIDs(got))
	}
	if files := filesBelow(t, outside); len(files) != 0 {
		t.Errorf("hostile layers wrote outside the store: %v", files)
	}
	imageRoot := filepath.Join(d.Root, "image")
	for _, dir := range []string{filepath.Join(imageRoot, "etc"), filepath.Join(imageRoot, "layers"), filepath.Join(imageRoot, "tmp")} {
		if files := filesBelow(t, dir); len(files) != 0 {
			t.Errorf("refused layers left files in %s: %v", dir, files)
		}
	}
}

// TestPullCutOffByStoppedRegistry stops the registry in the middle of a
// layer download: the pull fails, no image shows, and once the registry is
// back the same pull succeeds.
func TestPullCutOffByStoppedRegistry(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := pushImage(t, reg, "cut:v1", testimage.Busybox(t))
	proxy := startCuttingProxy(t, reg.Host())
	ref := proxy.host() + "/e2e/cut:v1"
	proxy.arm(layerDigest(t, p.img, 0), 64<<10, reg.Stop)
	d := StartDaemon(t)

	if id, err := d.pullErr(ref, nil); err == nil {
		t.Fatalf("pull through a registry stopped mid-layer succeeded: %s", id)
	}
	if got := d.listImages(t, ""); len(got) != 0 {
		t.Fatalf("images after a cut-off pull: %v", imageIDs(got))
	}
	if st := d.imageStatus(t, ref, false); st.GetImage() != nil {
		t.Fatalf("ImageStatus after a cut-off pull: %v", st.GetImage())
	}

	proxy.arm("", 0, nil)
	reg.Restart()
	if got := d.pull(t, ref); got != p.id {
		t.Fatalf("pull once the registry is back = %s, want %s", got, p.id)
	}
	if st := d.imageStatus(t, ref, false).GetImage(); !slices.Equal(st.GetRepoTags(), []string{ref}) {
		t.Fatalf("repo tags after the retry = %v, want [%s]", st.GetRepoTags(), ref)
	}
}

// TestImportExportRoundTrip exports an image from one daemon's store and
// imports it into another's while both daemons serve; the second daemon
// lists it with its names and runs a container from it, with the registry
// gone.
func TestImportExportRoundTrip(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	p := pushImage(t, reg, "roundtrip:v1", testimage.Busybox(t, testimage.WithEnv("FROM=archive")))
	src := StartDaemon(t)
	src.pull(t, p.ref)
	reg.Stop()
	archive := filepath.Join(t.TempDir(), "images.tar")

	code, stdout, stderr := src.imageCLI(t, "export", p.ref, archive)
	if code != 0 || !strings.Contains(stdout, p.id) || !strings.Contains(stdout, p.ref) {
		t.Fatalf("minicri image export: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}

	dst := StartDaemon(t)
	code, stdout, stderr = dst.imageCLI(t, "import", archive)
	if code != 0 || !strings.Contains(stdout, p.id) || !strings.Contains(stdout, p.ref) {
		t.Fatalf("minicri image import: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	// The serving daemon sees the import at its next call: no restart.
	st := dst.imageStatus(t, p.ref, false).GetImage()
	if diff := imageDiff(st, &runtime.Image{Id: p.id, RepoTags: []string{p.ref}, RepoDigests: []string{p.digestRef()},
		Size: imageSize(t, p.img), Uid: st.GetUid(), Spec: &runtime.ImageSpec{Image: p.id}}); diff != "" {
		t.Fatalf("imported image: %s", diff)
	}
	if code, stdout, _ := dst.imageCLI(t, "list"); code != 0 || !strings.Contains(stdout, p.id) {
		t.Errorf("minicri image list: exit %d\n%s", code, stdout)
	}

	podCfg := dst.hostNetworkPod("imported")
	pod := dst.runPod(t, podCfg)
	ctr, log := dst.runToExit(t, pod, podCfg, containerConfig("imported", p.ref, "sh", "-c", "echo $FROM"))
	if ctr.GetExitCode() != 0 || log != "archive\n" {
		t.Fatalf("container from the imported image: exit %d, log %q", ctr.GetExitCode(), log)
	}
}

// TestImportArchiveFormats imports a docker save tar and an OCI layout tar
// into a serving daemon: short names are normalised as the kubelet shows
// them, and a file that is no archive fails with exit 1 and adds nothing.
func TestImportArchiveFormats(t *testing.T) {
	d := StartDaemon(t)
	dir := t.TempDir()
	saved := testimage.Busybox(t, testimage.WithCmd("echo", "saved"))
	layout := testimage.Busybox(t, testimage.WithCmd("echo", "layout"), testimage.OCI())
	testimage.WriteDockerSave(t, filepath.Join(dir, "save.tar"), map[string]v1.Image{"busybox:latest": saved})
	testimage.WriteOCILayout(t, filepath.Join(dir, "layout.tar"), map[string]v1.Image{"registry.local:5000/team/app:v2": layout})
	if err := os.WriteFile(filepath.Join(dir, "garbage.tar"), []byte("not a tar file at all"), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, f := range []string{"save.tar", "layout.tar"} {
		if code, stdout, stderr := d.imageCLI(t, "import", filepath.Join(dir, f)); code != 0 {
			t.Fatalf("import %s: exit %d\n%s%s", f, code, stdout, stderr)
		}
	}
	savedID := testimage.ConfigDigest(t, saved)
	for _, name := range []string{"busybox", "busybox:latest", "docker.io/library/busybox:latest", "library/busybox"} {
		if got := imageIDs(d.listImages(t, name)); !slices.Equal(got, []string{savedID}) {
			t.Errorf("ListImages filter %q = %v, want the docker save image %s", name, got, savedID)
		}
	}
	if tags := d.imageStatus(t, "busybox", false).GetImage().GetRepoTags(); !slices.Equal(tags, []string{"docker.io/library/busybox:latest"}) {
		t.Errorf("repo tags of busybox:latest = %v, want the normalised name", tags)
	}
	layoutDigest := "registry.local:5000/team/app@" + testimage.Digest(t, layout)
	if st := d.imageStatus(t, "registry.local:5000/team/app:v2", false).GetImage(); st.GetId() != testimage.ConfigDigest(t, layout) ||
		!slices.Equal(st.GetRepoDigests(), []string{layoutDigest}) {
		t.Errorf("OCI layout image = %v, want ID %s and repo digest %s", st, testimage.ConfigDigest(t, layout), layoutDigest)
	}

	code, stdout, stderr := d.imageCLI(t, "import", filepath.Join(dir, "garbage.tar"))
	if code != 1 || !strings.Contains(stderr, "garbage.tar") {
		t.Errorf("import of a file that is no archive: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if got := d.listImages(t, ""); len(got) != 2 {
		t.Errorf("after a failed import: %d images, want the 2 imported before", len(got))
	}
}
