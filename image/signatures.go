package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Where cosign keeps an image's signatures, and what they look like: a
// manifest tagged sha256-<hex>.sig in the image's repository (or, in its
// OCI 1.1 mode, a referrer of the image's manifest with the artifact type
// below), whose layers are simple-signing payloads, each with its
// signature in an annotation.
const (
	cosignPayloadType       = types.MediaType("application/vnd.dev.cosign.simplesigning.v1+json")
	cosignSignatureKey      = "dev.cosignproject.cosign/signature"
	cosignReferrerArtifact  = "application/vnd.dev.cosign.artifact.sig.v1+json"
	cosignSignatureTagLayer = ".sig"
)

// Caps on what a registry serves for signatures, all read into memory
// before a byte of the image's layers: a cosign signature manifest of one
// signature is about 600 bytes and its payload about 250.
const (
	maxSignatureManifestSize = 256 << 10
	maxSignatures            = 64 // over every manifest of an image's signatures
	maxSignaturePayloadSize  = 64 << 10
	maxSignatureReferrers    = 16 // cosign referrer manifests asked for
)

// checkPolicy judges the image whose top manifest is top against the
// signature policy in force for namespace (none: every image passes), after
// the manifest is fetched and before any blob is. The signatures are
// fetched through src: the same endpoints, credentials and caps as the
// image's own manifests. An admitted image's look-ups are answered, to be
// kept with it.
func (s *Store) checkPolicy(ctx context.Context, live *Reloadable, src *remoteSource, named reference, top manifest, namespace string) ([]fetchedSignatures, error) {
	file, err := policyFileFor(live.SignaturePolicy, live.SignaturePolicyDir, namespace)
	if err != nil || file == "" {
		return nil, err
	}
	p, err := loadPolicy(file)
	if err != nil {
		return nil, fmt.Errorf("%w: signature policy %s: %v", ErrSignatureRefused, file, err)
	}
	img := identity{repo: named.repo(), tag: named.tag, digest: named.digest}
	reqs, scope := p.requirementsFor(img)
	sigSrc := *src // the image's blobs are still asked of the endpoint that served its manifest
	var fetched []fetchedSignatures
	look := func(source string, fetch func(context.Context, v1.Hash) ([]cosignSignature, error)) func() ([]cosignSignature, error) {
		return onceSignatures(func() ([]cosignSignature, error) {
			sigs, err := fetch(ctx, top.digest)
			if err == nil {
				fetched = append(fetched, fetchedSignatures{source: source, sigs: sigs})
			}
			return sigs, err
		})
	}
	signatures := signatureSource{
		tagged:   look(sourceTag, sigSrc.taggedSignatures),
		referred: look(sourceReferrers, sigSrc.referredSignatures),
	}
	err = judge(reqs, img, top.digest.String(), signatures)
	if err == nil {
		return fetched, nil
	}
	if isContextError(err) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrUnauthorized) {
		return nil, fmt.Errorf("signatures of %s: %w", named, err) // a failure to look, not a refusal
	}
	return nil, &PolicyError{Image: named.String(), File: file, Scope: scope, Reason: err.Error()}
}

func onceSignatures(fetch func() ([]cosignSignature, error)) func() ([]cosignSignature, error) {
	var (
		sigs []cosignSignature
		err  error
		done bool
	)
	return func() ([]cosignSignature, error) {
		if !done {
			sigs, err = fetch()
			done = true
		}
		return sigs, err
	}
}

// taggedSignatures fetches the cosign signatures of the manifest with
// digest d that its .sig tag holds. None is no error; a cap exceeded is.
func (r *remoteSource) taggedSignatures(ctx context.Context, d v1.Hash) ([]cosignSignature, error) {
	tag := d.Algorithm + "-" + d.Hex + cosignSignatureTagLayer
	m, err := r.manifestWithin(ctx, tag, readLimit{what: "signature manifest " + tag, max: maxSignatureManifestSize})
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("signature manifest %s: %w", tag, err)
	}
	return r.signaturesOf(ctx, m, "tag "+tag, nil)
}

// referredSignatures fetches the cosign signatures of the manifest with
// digest d that refer to it (OCI 1.1), where the registry answers the
// referrers API (or its fallback tag). None is no error; a cap exceeded is.
func (r *remoteSource) referredSignatures(ctx context.Context, d v1.Hash) ([]cosignSignature, error) {
	refs, err := r.cosignReferrers(ctx, d)
	if errors.Is(err, ErrSignatureRefused) || errors.Is(err, ErrTooLarge) {
		return nil, err
	}
	if err != nil {
		r.log.WithError(err).Info("signatures: no referrers (the registry may not have the referrers API)")
		return nil, nil
	}
	var sigs []cosignSignature
	for _, desc := range refs {
		if err := checkDigest(desc.Digest); err != nil {
			return nil, err
		}
		limit := readLimit{what: "signature manifest " + desc.Digest.String(), max: maxSignatureManifestSize}
		if desc.Size > 0 && desc.Size <= maxSignatureManifestSize {
			limit.max, limit.declared = desc.Size, true
		}
		m, err := r.manifestWithin(ctx, desc.Digest.String(), limit)
		if err != nil {
			return nil, fmt.Errorf("signature manifest %s: %w", desc.Digest, err)
		}
		if sigs, err = r.signaturesOf(ctx, m, "referrer "+desc.Digest.String(), sigs); err != nil {
			return nil, err
		}
	}
	return sigs, nil
}

// signaturesOf adds the signatures of one signature manifest to sigs.
func (r *remoteSource) signaturesOf(ctx context.Context, m manifest, where string, sigs []cosignSignature) ([]cosignSignature, error) {
	mf, err := v1.ParseManifest(bytes.NewReader(m.raw))
	if err != nil {
		return nil, fmt.Errorf("signature manifest (%s): %w", where, err)
	}
	n := len(sigs)
	for _, l := range mf.Layers {
		if l.MediaType == cosignPayloadType {
			n++
		}
	}
	if n > maxSignatures {
		return nil, fmt.Errorf("%w: more than %d signatures (%s)", ErrSignatureRefused, maxSignatures, where)
	}
	for _, l := range mf.Layers {
		if l.MediaType != cosignPayloadType {
			continue // an attestation or another attachment
		}
		if l.Size < 0 || l.Size > maxSignaturePayloadSize {
			return nil, fmt.Errorf("%w: signature payload %s (%s) declares %d bytes, more than the %d allowed", ErrSignatureRefused, l.Digest, where, l.Size, maxSignaturePayloadSize)
		}
		payload, err := r.payload(ctx, l)
		if err != nil {
			return nil, fmt.Errorf("signature payload %s (%s): %w", l.Digest, where, err)
		}
		sigs = append(sigs, cosignSignature{payload: payload, signature: l.Annotations[cosignSignatureKey], where: where})
	}
	return sigs, nil
}

// payload reads one signature payload into memory: no more than its
// descriptor declares, and only if it hashes to its digest; under the
// pull's progress watch from the request on.
func (r *remoteSource) payload(ctx context.Context, desc v1.Descriptor) (_ []byte, err error) {
	if err := checkDigest(desc.Digest); err != nil {
		return nil, err
	}
	limit := readLimit{what: "signature payload " + desc.Digest.String(), max: desc.Size, declared: true}
	watch := r.progress.begin(payloadDownload, desc.Digest.String(), desc.Size)
	defer func() { r.progress.end(watch, err) }()
	if watch != nil {
		limit.counted = watch
	}
	ctx = withReadLimit(ctx, limit)
	rc, err := r.blob(ctx, desc)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, desc.Size+1))
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	if int64(len(data)) != desc.Size || hex.EncodeToString(sum[:]) != desc.Digest.Hex {
		return nil, fmt.Errorf("%d bytes hashing to sha256:%x: %w", len(data), sum, ErrDigestMismatch)
	}
	return data, nil
}

// cosignReferrers lists the cosign signature manifests that refer to d, as
// the first endpoint that may serve digests answers the referrers API.
func (r *remoteSource) cosignReferrers(ctx context.Context, d v1.Hash) ([]v1.Descriptor, error) {
	for i := r.first; i < len(r.eps); i++ {
		ep := r.eps[i]
		if !ep.pull {
			continue
		}
		idx, err := r.referrers(ctx, ep, d)
		if err != nil {
			return nil, endpointError(ep, err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, endpointError(ep, err)
		}
		var out []v1.Descriptor
		for _, desc := range im.Manifests {
			if desc.ArtifactType != cosignReferrerArtifact {
				continue
			}
			if len(out) == maxSignatureReferrers {
				return nil, fmt.Errorf("%w: more than %d cosign signature referrers of %s", ErrSignatureRefused, maxSignatureReferrers, d)
			}
			out = append(out, desc)
		}
		return out, nil
	}
	return nil, errors.New("no host of the registry has the pull capability")
}

// referrers is one endpoint's referrers list of d, read through its cap and
// under the pull's progress watch from the request on, as a manifest is.
func (r *remoteSource) referrers(ctx context.Context, ep *endpoint, d v1.Hash) (_ v1.ImageIndex, err error) {
	limit := readLimit{what: "referrers of " + d.String(), max: maxSignatureManifestSize}
	watch := r.progress.begin(referrersDownload, d.String(), limit.max)
	defer func() { r.progress.end(watch, err) }()
	if watch != nil {
		limit.counted = watch
	}
	ctx = withReadLimit(ctx, limit)
	conn, err := ep.connect(ctx)
	if err != nil {
		return nil, err
	}
	return remote.Referrers(ep.repo.Digest(d.String()), remote.Reuse(conn.puller), remote.WithContext(ctx))
}
