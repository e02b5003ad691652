package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sirupsen/logrus"

	"github.com/minicri/minicri/internal/tracing"
)

// maxIndexDepth bounds manifest lists inside manifest lists.
const maxIndexDepth = 3

// Pull fetches ref ("busybox", "127.0.0.1:5000/app:v1", "repo@sha256:…")
// from its registry or the registry's mirrors, with auth (may be nil), and
// returns the image. A manifest list resolves to this machine's platform
// (linux and the architecture the daemon was built for). The image's tags and repo digests name the reference
// asked for, never the mirror. A pull that fails leaves no image; blobs it
// completed stay (until the next garbage collection) so that a retry
// resumes with what is missing, except for an image over a bound of Limits:
// its retry would be refused too, so its blobs and layers go at once.
func (s *Store) Pull(ctx context.Context, ref string, auth *Auth) (Image, error) {
	return s.PullForNamespace(ctx, ref, auth, "")
}

// PullForNamespace is Pull for a pod of a Kubernetes namespace ("": none),
// whose signature_policy_dir file, if any, judges the image. An image the
// signature policy refuses fails with a *PolicyError, before any blob is
// fetched.
func (s *Store) PullForNamespace(ctx context.Context, ref string, auth *Auth, namespace string) (Image, error) {
	named, err := parseReference(ref)
	if err != nil {
		return Image{}, err
	}
	live := s.live.Load()
	start := time.Now()
	ctx, stalled, finish := limitPull(ctx, live)
	// Neither the reference (the client's text) nor auth: the pulled image's
	// ID names it once it is there.
	ctx, span := tracing.Start(ctx, "image.pull")
	s.log.WithField("image", named.String()).Info("pulling image")
	img, err := s.pull(ctx, named, auth, live, namespace, stalled)
	s.collectRefused(err)
	if err = finish(err); err != nil {
		err = fmt.Errorf("pull %s: %w", named, err)
		tracing.End(span, err)
		return Image{}, err
	}
	if span.IsRecording() {
		span.SetAttributes(tracing.ImageID.String(img.ID))
	}
	tracing.End(span, nil)
	s.log.WithFields(logrus.Fields{
		"image": named.String(), "id": img.ID, "size": formatBytes(int64(img.Size)),
		"duration": time.Since(start).Round(time.Millisecond).String(),
	}).Info("image pulled")
	return img, nil
}

// limitPull puts live's limits of a pull on ctx: its timeout, and the
// cause a stalled download cancels it with (stalled, which the progress
// watch calls). finish turns the error of the work done under ctx into the
// one to report (the *StalledError rather than the "context canceled" of
// the download; the timeout named) and releases ctx.
func limitPull(ctx context.Context, live *Reloadable) (_ context.Context, stalled context.CancelCauseFunc, finish func(error) error) {
	start := time.Now()
	cancel := context.CancelFunc(func() {})
	if live.PullTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, live.PullTimeout)
	}
	ctx, stalled = context.WithCancelCause(ctx)
	return ctx, stalled, func(err error) error {
		defer cancel()
		defer stalled(nil)
		var stall *StalledError
		if err != nil && errors.As(context.Cause(ctx), &stall) {
			err = stall
		}
		if err != nil && errors.Is(err, context.DeadlineExceeded) && live.PullTimeout > 0 && time.Since(start) >= live.PullTimeout {
			err = fmt.Errorf("pull timeout of %v reached: %w", live.PullTimeout, err)
		}
		return err
	}
}

// remoteSourceFor is where a pull of named reads from: the endpoints of
// its registry (mirrors, hosts.toml, credentials), under a progress watch
// that calls stalled; stop ends the watch.
func (s *Store) remoteSourceFor(named reference, auth *Auth, live *Reloadable, stalled context.CancelCauseFunc) (_ *remoteSource, stop func(), _ error) {
	eps, err := s.endpoints(named, auth)
	if err != nil {
		return nil, nil, err
	}
	log := s.log.WithField("image", named.String())
	progress := newPullProgress(log, live.PullProgress, s.opts.Hooks.progressInterval(), func(err error) { stalled(err) })
	return &remoteSource{eps: eps, progress: progress, log: log}, progress.stop, nil
}

func (s *Store) pull(ctx context.Context, named reference, auth *Auth, live *Reloadable, namespace string, stalled context.CancelCauseFunc) (Image, error) {
	release, err := s.holdContent()
	if err != nil {
		return Image{}, err
	}
	defer release()
	src, stop, err := s.remoteSourceFor(named, auth, live, stalled)
	if err != nil {
		return Image{}, err
	}
	defer stop()
	progress := src.progress
	identifier := named.tag
	if named.digest != "" {
		identifier = named.digest
	}
	top, err := src.manifest(ctx, identifier, 0)
	if err != nil {
		return Image{}, err
	}
	fetched, err := s.checkPolicy(ctx, live, src, named, top, namespace)
	if err != nil {
		return Image{}, err
	}
	// What the policy looked at is kept, so that a create in another
	// namespace is judged against it without asking the registry again.
	signatures, err := s.keepSignatures(named.repo(), top.digest.String(), fetched)
	if err != nil {
		return Image{}, err
	}
	m, err := s.resolvePlatform(ctx, src, top)
	if err != nil {
		return Image{}, err
	}
	req := ingestRequest{
		manifest:    m.raw,
		mediaType:   m.mediaType,
		open:        src.blob,
		openAt:      src.blobFrom,
		artifacts:   true,
		repoDigests: []string{named.withDigest(top.digest.String())},
		signatures:  signatures,
		progress:    progress,
	}
	if named.tag != "" {
		req.tags = []string{named.String()}
	}
	return s.ingest(ctx, req)
}

// resolvePlatform follows manifest lists down to this platform's image manifest.
func (s *Store) resolvePlatform(ctx context.Context, src *remoteSource, m manifest) (manifest, error) {
	return followIndex(m, func(child v1.Descriptor) (manifest, error) {
		if err := checkDigest(child.Digest); err != nil {
			return manifest{}, err
		}
		return src.manifest(ctx, child.Digest.String(), child.Size)
	})
}

// followIndex follows manifest lists from m down to this platform's image
// manifest, reading each chosen child with fetch; nesting is bounded.
func followIndex(m manifest, fetch func(child v1.Descriptor) (manifest, error)) (manifest, error) {
	for depth := 0; m.mediaType.IsIndex(); depth++ {
		if depth == maxIndexDepth {
			return manifest{}, fmt.Errorf("manifest lists nested deeper than %d", maxIndexDepth)
		}
		idx, err := v1.ParseIndexManifest(bytes.NewReader(m.raw))
		if err != nil {
			return manifest{}, fmt.Errorf("parse manifest list %s: %w", m.digest, err)
		}
		child, err := choosePlatform(idx, wantPlatform())
		if err != nil {
			return manifest{}, err
		}
		if m, err = fetch(child); err != nil {
			return manifest{}, err
		}
	}
	return m, nil
}
