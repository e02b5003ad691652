// Command images makes the images of the kubeadm cluster on minicri (the
// control plane, kube-proxy, CoreDNS, the pause image kubeadm asks for) from
// binaries on this host, offline, and serves them to a registry the way an
// operator with a private registry would: the kubelet then pulls them through
// minicri's PullImage like any other image.
//
//	images build LAYOUT 'REF ENTRYPOINT FILE[=DEST]...' ...
//	images push LAYOUT HOST
//
// build writes one image per spec into the OCI layout LAYOUT (made anew):
// REF is NAME:TAG, ENTRYPOINT the image's entrypoint ("-" for none: the
// pod's command names the binary, found on PATH; words are separated by
// commas, and what follows a ";" is the image's default arguments, as in
// "/agnhost;pause"), each FILE is copied to DEST (its own path when no DEST
// is given), a directory with what is below it (an empty one too), a
// symbolic link as a link together with what it points to, and a
// dynamically linked executable or library together with the libraries ldd
// resolves for it. Every entry has a fixed mtime and root ownership, so the
// same files give the same digests.
//
// A file keeps the permission bits it has on the host, never its setuid,
// setgid or sticky bit: an image holds a setuid binary only where its spec
// asks for one, with FILE=DEST:MODE (MODE in octal, as chmod takes it, for
// a regular file: "nnp=/usr/local/bin/nnp:6755" as upstream's nonewprivs
// image's "chmod +s").
//
// push copies every image of LAYOUT to HOST/REF over plain HTTP (a loopback
// registry).
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// refAnnotation names an image of the layout by the reference it is pushed as.
const refAnnotation = "org.opencontainers.image.ref.name"

// epoch is the mtime of every entry and the creation time of every image.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// imagePath is the PATH of every image: the pod specs kubeadm writes name
// the control plane's binaries without a directory.
const imagePath = "PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	switch {
	case len(args) >= 2 && args[0] == "build":
		return build(args[1], args[2:])
	case len(args) == 3 && args[0] == "push":
		return push(args[1], args[2])
	}
	return errors.New("usage: images build LAYOUT 'REF ENTRYPOINT FILE[=DEST]...'... | images push LAYOUT HOST")
}

func build(dir string, specs []string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("make layout %s: %w", dir, err)
	}
	for _, spec := range specs {
		f := strings.Fields(spec)
		if len(f) < 3 {
			return fmt.Errorf("image spec %q: want REF ENTRYPOINT FILE...", spec)
		}
		img, err := image(f[1], f[2:])
		if err != nil {
			return fmt.Errorf("image %s: %w", f[0], err)
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{refAnnotation: f[0]})); err != nil {
			return fmt.Errorf("image %s: write: %w", f[0], err)
		}
		d, _ := img.Digest()
		fmt.Fprintf(os.Stderr, "images: %s %s\n", f[0], d)
	}
	return nil
}

// image is one layer of files, with the entrypoint and PATH as its config.
func image(entrypoint string, files []string) (v1.Image, error) {
	t := &tree{entries: map[string]entry{}}
	for _, f := range files {
		src, dest, ok := strings.Cut(f, "=")
		if !ok {
			dest = src
		}
		if d, m, ok := strings.Cut(dest, ":"); ok {
			mode, err := strconv.ParseUint(m, 8, 12)
			if err != nil || mode == 0 {
				return nil, fmt.Errorf("file %s: mode %q: want octal, 1 to 7777", f, m)
			}
			if err := t.addFile(src, d, int64(mode)); err != nil {
				return nil, err
			}
			continue
		}
		if err := t.add(src, dest); err != nil {
			return nil, err
		}
	}
	raw, err := t.tar()
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cfg := v1.Config{Env: []string{imagePath}}
	if entrypoint != "-" {
		entry, cmd, _ := strings.Cut(entrypoint, ";")
		cfg.Entrypoint = words(entry)
		cfg.Cmd = words(cmd)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Config = "amd64", "linux", cfg
	cf.Created = v1.Time{Time: epoch}
	return mutate.ConfigFile(img, cf)
}

// words splits a comma-separated list of an image spec; none for "".
func words(list string) []string {
	if list == "" {
		return nil
	}
	return strings.Split(list, ",")
}

// entry is what one path of the image holds: a file's host source (with the
// mode its spec gives it, or 0 for the host's permission bits), a link's
// target, or an empty directory.
type entry struct {
	src, link string
	mode      int64
	dir       bool
}

// tree is the files of one image, by their path in it.
type tree struct {
	entries map[string]entry
}

// add puts the host's src at dest, with what it needs (see the package doc).
func (t *tree) add(src, dest string) error {
	dest = path.Clean("/" + dest)
	if _, ok := t.entries[dest]; ok {
		return nil
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		t.entries[dest] = entry{link: target}
		abs := target
		if !filepath.IsAbs(abs) {
			abs = filepath.Join(filepath.Dir(src), target)
		}
		if dest == src {
			return t.add(abs, abs)
		}
		// A link copied elsewhere points at a target copied beside it.
		return t.add(abs, path.Join(path.Dir(dest), target))
	case fi.IsDir():
		des, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		if len(des) == 0 {
			t.entries[dest] = entry{dir: true}
		}
		for _, de := range des {
			if err := t.add(filepath.Join(src, de.Name()), path.Join(dest, de.Name())); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		t.entries[dest] = entry{src: src}
		libs, err := sharedLibs(src)
		if err != nil {
			return err
		}
		for _, l := range libs {
			if err := t.add(l, l); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%s: not a file, directory or link", src)
}

// addFile puts the host's regular file src at dest with the mode bits mode
// (setuid, setgid and sticky included), and the libraries it needs.
func (t *tree) addFile(src, dest string, mode int64) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: a mode is for a regular file only", src)
	}
	dest = path.Clean("/" + dest)
	if e, ok := t.entries[dest]; ok && (e.src != src || e.mode != mode) {
		return fmt.Errorf("%s: already in the image from %s", dest, e.src)
	}
	if err := t.add(src, dest); err != nil {
		return err
	}
	e := t.entries[dest]
	e.mode = mode
	t.entries[dest] = e
	return nil
}

// lddLine matches the path of a library in ldd's output: "libc.so.6 =>
// /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and the loader's "/lib64/ld-... (0x...)".
var lddLine = regexp.MustCompile(`(?m)^\s*(?:\S+ => )?(/\S+) \(0x[0-9a-f]+\)$`)

// sharedLibs are the libraries the dynamic loader resolves for an ELF file,
// none for any other file (a static binary, a script, data).
func sharedLibs(file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	magic := make([]byte, 4)
	_, err = io.ReadFull(f, magic)
	f.Close()
	if err != nil || string(magic) != "\x7fELF" {
		return nil, nil
	}
	out, err := exec.Command("ldd", file).Output()
	if err != nil {
		// ldd fails on a static executable ("not a dynamic executable").
		return nil, nil
	}
	var libs []string
	for _, m := range lddLine.FindAllStringSubmatch(string(out), -1) {
		libs = append(libs, m[1])
	}
	return libs, nil
}

// tar is the layer: every directory on the way to an entry, then the entries, sorted.
func (t *tree) tar() ([]byte, error) {
	dirs := map[string]bool{"/tmp": true}
	for p := range t.entries {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var names []string
	for d := range dirs {
		if _, ok := t.entries[d]; !ok {
			names = append(names, d)
		}
	}
	for p := range t.entries {
		names = append(names, p)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		h := &tar.Header{Name: strings.TrimPrefix(n, "/"), ModTime: epoch, Format: tar.FormatPAX}
		e, isEntry := t.entries[n]
		var body []byte
		switch {
		case !isEntry || e.dir:
			h.Typeflag, h.Mode, h.Name = tar.TypeDir, 0o755, h.Name+"/"
			if n == "/tmp" {
				h.Mode = 0o1777
			}
		case e.link != "":
			h.Typeflag, h.Mode, h.Linkname = tar.TypeSymlink, 0o777, e.link
		default:
			fi, err := os.Stat(e.src)
			if err != nil {
				return nil, err
			}
			if body, err = os.ReadFile(e.src); err != nil {
				return nil, err
			}
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, int64(fi.Mode().Perm()), int64(len(body))
			if e.mode != 0 {
				h.Mode = e.mode
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func push(dir, host string) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		return fmt.Errorf("read layout %s: %w", dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range im.Manifests {
		ref := d.Annotations[refAnnotation]
		tag, err := name.NewTag(host+"/"+ref, name.Insecure)
		if err != nil {
			return fmt.Errorf("image %q: %w", ref, err)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
		if err := remote.Write(tag, img); err != nil {
			return fmt.Errorf("push %s: %w", tag, err)
		}
	}
	return nil
}
