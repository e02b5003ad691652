package image

import (
	"context"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The signatures a pull looked up are kept with the image: each payload a
// blob of the content store (counted by FsInfo, collected with the image),
// and the record of where they were looked for in the image's record. A
// container's namespace policy is judged against them at create
// (sigadmit.go), offline; what a pull did not look up is fetched then.

// Where a set of signatures was looked for.
const (
	sourceTag       = "tag"       // cosign's sha256-<hex>.sig tag
	sourceReferrers = "referrers" // OCI 1.1 referrers of the manifest
)

// maxSignatureSets bounds the sets one image record keeps: one per
// repository, signed manifest and source. The oldest go first.
const maxSignatureSets = 16

// SignatureSet is what one look-up of an image's signatures found: in
// repository Repo, for the manifest Digest, at Source ("tag" or
// "referrers"). No signature: looked, none there.
type SignatureSet struct {
	Repo       string          `json:"repo"`   // "127.0.0.1:5000/team/app"
	Digest     string          `json:"digest"` // the manifest signed: the one pulled, index or image
	Source     string          `json:"source"`
	Signatures []KeptSignature `json:"signatures,omitempty"`
}

// KeptSignature is one cosign signature: its payload (a blob of the store)
// and the signature of it, from its layer's annotation.
type KeptSignature struct {
	Payload   string `json:"payload"` // "sha256:…" of the payload blob
	Signature string `json:"signature,omitempty"`
	Where     string `json:"where"`
}

func (k SignatureSet) sameLookup(o SignatureSet) bool {
	return k.Repo == o.Repo && k.Digest == o.Digest && k.Source == o.Source
}

// mergeSignatureSets replaces the sets of old that add looks up again and
// appends the others, keeping the newest maxSignatureSets.
func mergeSignatureSets(old, add []SignatureSet) []SignatureSet {
	out := make([]SignatureSet, 0, len(old)+len(add))
	for _, o := range old {
		replaced := false
		for _, a := range add {
			replaced = replaced || o.sameLookup(a)
		}
		if !replaced {
			out = append(out, o)
		}
	}
	out = append(out, add...)
	if len(out) > maxSignatureSets {
		out = out[len(out)-maxSignatureSets:]
	}
	return out
}

// findSignatureSet is the set of sets that answers a look-up, if any.
func findSignatureSet(sets []SignatureSet, repo, digest, source string) (SignatureSet, bool) {
	want := SignatureSet{Repo: repo, Digest: digest, Source: source}
	for _, k := range sets {
		if k.sameLookup(want) {
			return k, true
		}
	}
	return SignatureSet{}, false
}

// fetchedSignatures is one look-up a judgement made, to be kept.
type fetchedSignatures struct {
	source string
	sigs   []cosignSignature
}

// keepSignatures stores the payloads of what was fetched for the manifest
// digest of repo and answers the sets for the image record. The caller
// holds the content lock, so that no collection runs before the record
// names the payloads.
func (s *Store) keepSignatures(repo, digest string, fetched []fetchedSignatures) ([]SignatureSet, error) {
	sets := make([]SignatureSet, 0, len(fetched))
	for _, f := range fetched {
		set := SignatureSet{Repo: repo, Digest: digest, Source: f.source}
		for _, sig := range f.sigs {
			h, err := s.putBlob(sig.payload)
			if err != nil {
				return nil, fmt.Errorf("keep signature payload (%s): %w", sig.where, err)
			}
			set.Signatures = append(set.Signatures, KeptSignature{Payload: h.String(), Signature: sig.signature, Where: sig.where})
		}
		sets = append(sets, set)
	}
	return sets, nil
}

// keptSignatures reads a kept set's payloads back from the store.
func (s *Store) keptSignatures(set SignatureSet) ([]cosignSignature, error) {
	sigs := make([]cosignSignature, 0, len(set.Signatures))
	for _, k := range set.Signatures {
		h, err := v1.NewHash(k.Payload)
		if err != nil {
			return nil, fmt.Errorf("kept signature payload %q: %w", k.Payload, err)
		}
		// Believed only once a key of the policy verifies it, as at pull.
		payload, err := readSmallFile(s.blobPath(h))
		if err != nil {
			return nil, fmt.Errorf("kept signature payload %s: %w", h, err)
		}
		sigs = append(sigs, cosignSignature{payload: payload, signature: k.Signature, where: k.Where + " (kept)"})
	}
	return sigs, nil
}

// recordSignatures adds sets to the record of image id; an image removed
// meanwhile is no error (its payloads go at the next collection).
func (s *Store) recordSignatures(id string, sets []SignatureSet) error {
	_, err := s.update(func(images []Image) ([]Image, error) {
		for i := range images {
			if images[i].ID == id {
				images[i].Signatures = mergeSignatureSets(images[i].Signatures, sets)
			}
		}
		return images, nil
	})
	return err
}

// fetchSignaturesFor looks up the signatures of the manifest digest of
// repo at source, for a container's create, under the limits of a pull
// (timeout, progress watch, endpoints, hosts.toml, mirrors, caps, the
// node's credentials), and keeps them with image id.
func (s *Store) fetchSignaturesFor(ctx context.Context, live *Reloadable, id, repo, digest, source string) ([]cosignSignature, error) {
	named, err := parseReference(repo + "@" + digest)
	if err != nil {
		return nil, err
	}
	d, err := v1.NewHash(digest)
	if err != nil {
		return nil, err
	}
	release, err := s.holdContent()
	if err != nil {
		return nil, err
	}
	defer release()
	ctx, stalled, finish := limitPull(ctx, live)
	sigs, err := func() ([]cosignSignature, error) {
		src, stop, err := s.remoteSourceFor(named, nil, live, stalled)
		if err != nil {
			return nil, err
		}
		defer stop()
		if source == sourceTag {
			return src.taggedSignatures(ctx, d)
		}
		return src.referredSignatures(ctx, d)
	}()
	if err = finish(err); err != nil {
		return nil, err
	}
	sets, err := s.keepSignatures(repo, digest, []fetchedSignatures{{source: source, sigs: sigs}})
	if err == nil {
		err = s.recordSignatures(id, sets)
	}
	if err != nil {
		// The judgement stands on what was fetched; the next create fetches again.
		s.log.WithError(err).WithField("image", named.String()).Warn("image store: cannot keep the signatures fetched")
	}
	return sigs, nil
}
