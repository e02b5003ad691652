package image

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
)

// A pull is judged by the policy of the namespace it is made for, but the
// store is shared: an image another namespace pulled (or one pulled before
// a policy was put in force) is there for every pod, and the kubelet's
// IfNotPresent never pulls it again. So every create is judged too, by the
// policy of its pod's namespace, against the signatures the store kept
// (sigkeep.go); what the store lacks is fetched then, under a pull's
// limits. An admission is cached per policy contents (the file and its key
// files, as read), image and the name the create asked for: a create of an
// image already admitted reads the policy's few small files and no more.

// maxAdmissions bounds the admissions cached; the cache starts over when full.
const maxAdmissions = 4096

// policyCache keeps parsed policies and the admissions made under them.
type policyCache struct {
	mu       sync.Mutex
	parsed   map[string]*parsedPolicy // by file
	admitted map[admission]*parsedPolicy
}

// parsedPolicy is a policy file parsed from contents that hashed to sum.
type parsedPolicy struct {
	p   *policy
	sum [sha256.Size]byte
}

// admission is one image admitted by one file for a create that asked
// for it as ref.
type admission struct {
	file, imageID, ref string
}

// current is the policy file parses to now. The file and its key files are
// read every time: a cached parse serves only while they hold what it was
// parsed from, so that an edit, a new key or a file replaced is seen by the
// next create.
func (c *policyCache) current(file string) (*parsedPolicy, error) {
	pp, err := c.reparse(file)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		delete(c.parsed, file) // and with it every admission it made
		return nil, err
	}
	if c.parsed == nil {
		c.parsed = map[string]*parsedPolicy{}
	}
	c.parsed[file] = pp
	return pp, nil
}

// reparse is the cached parse of file if it still holds, else a new one.
func (c *policyCache) reparse(file string) (*parsedPolicy, error) {
	data, err := readSmallFile(file)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	c.mu.Lock()
	pp := c.parsed[file]
	c.mu.Unlock()
	if pp != nil && pp.sum == sum && keyFilesUnchanged(pp.p.keyFiles()) {
		return pp, nil
	}
	p, err := parsePolicy(file, data)
	if err != nil {
		return nil, err
	}
	return &parsedPolicy{p: p, sum: sum}, nil
}

// keyFilesUnchanged: every key file still has the contents it was read with.
func keyFilesUnchanged(files []readKeyFile) bool {
	for _, k := range files {
		data, err := readSmallFile(k.path)
		if err != nil || sha256.Sum256(data) != k.sum {
			return false
		}
	}
	return true
}

// isAdmitted: a was admitted under pp, which is still the file's policy.
func (c *policyCache) isAdmitted(a admission, pp *parsedPolicy) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.admitted[a] == pp && c.parsed[a.file] == pp
}

func (c *policyCache) admit(a admission, pp *parsedPolicy) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.admitted == nil || len(c.admitted) >= maxAdmissions {
		c.admitted = map[admission]*parsedPolicy{}
	}
	c.admitted[a] = pp
}

// admitName is a name an image is judged under, and the manifest digest
// its signatures sign.
type admitName struct {
	id     identity
	digest string
}

// Admit judges img for a container of a pod of namespace by the signature
// policy in force for that namespace, as a pull for it would: under ref,
// the name the container asked for, when it names img in the store, else
// under every name img has (admitted if one is). With no policy configured
// it does nothing. A refusal is a *PolicyError naming the policy file and
// the image; a policy that cannot be read refuses too.
func (s *Store) Admit(ctx context.Context, img Image, ref, namespace string) error {
	live := s.live.Load()
	if live.SignaturePolicy == "" && live.SignaturePolicyDir == "" {
		return nil
	}
	file, err := policyFileFor(live.SignaturePolicy, live.SignaturePolicyDir, namespace)
	if err != nil || file == "" {
		return err
	}
	pp, err := s.policies.current(file)
	if err != nil {
		return fmt.Errorf("%w: signature policy %s: image %s: %v", ErrSignatureRefused, file, admitDisplay(img, ref), err)
	}
	asked := admission{file: file, imageID: img.ID, ref: ref}
	if s.policies.isAdmitted(asked, pp) {
		return nil
	}
	names := s.admitNames(img, ref)
	if len(names) == 0 {
		// No name for a scope to match: only the default can judge it,
		// and no signature can be looked up for it.
		if err := judge(pp.p.def, identity{}, img.ManifestDigest, noSignatures()); err != nil {
			return &PolicyError{Image: admitDisplay(img, ref), File: file, Scope: "default", Reason: err.Error() + " (the image has no name to look its signatures up by)"}
		}
		s.policies.admit(asked, pp)
		return nil
	}
	var refused error
	for _, n := range names {
		err := s.judgeAtCreate(ctx, live, pp.p, img, n)
		if err == nil {
			// A verified signature stays one: the admission holds while
			// the policy does, even if the image's names change.
			s.policies.admit(asked, pp)
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("signatures of %s: %w", n.id, ctx.Err())
		}
		if refused == nil {
			refused = err
		}
	}
	return refused
}

// admitDisplay is how a refusal names the image: the name asked for,
// normalised, when it is one, else the image's ID.
func admitDisplay(img Image, ref string) string {
	if named, ok := askedName(ref); ok {
		return named.String()
	}
	return img.ID
}

// askedName is ref parsed, when it is a name rather than an image ID or a
// prefix of one.
func askedName(ref string) (reference, bool) {
	if idPattern.MatchString(ref) {
		return reference{}, false
	}
	named, err := parseReference(ref)
	return named, err == nil
}

// admitNames are the names img is judged under for a create that asked
// for ref (see Admit).
func (s *Store) admitNames(img Image, ref string) []admitName {
	if named, ok := askedName(ref); ok {
		if found, err := s.Get(named.String()); err == nil && found.ID == img.ID {
			id := identity{repo: named.repo(), tag: named.tag, digest: named.digest}
			if named.digest != "" {
				return []admitName{{id: id, digest: named.digest}}
			}
			var out []admitName
			for _, rd := range img.RepoDigests {
				if r, err := parseReference(rd); err == nil && r.repo() == named.repo() {
					out = append(out, admitName{id: id, digest: r.digest})
				}
			}
			if len(out) == 0 {
				out = append(out, admitName{id: id, digest: img.ManifestDigest})
			}
			return out
		}
	}
	var out []admitName
	for _, rd := range img.RepoDigests {
		if r, err := parseReference(rd); err == nil {
			out = append(out, admitName{id: identity{repo: r.repo(), digest: r.digest}, digest: r.digest})
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, tag := range img.RepoTags {
		if r, err := parseReference(tag); err == nil {
			out = append(out, admitName{id: identity{repo: r.repo(), tag: r.tag}, digest: img.ManifestDigest})
		}
	}
	return out
}

// lookupError is a failure to fetch signatures, not a refusal by them.
type lookupError struct{ err error }

func (e *lookupError) Error() string { return "its signatures could not be fetched: " + e.err.Error() }
func (e *lookupError) Unwrap() error { return e.err }

// judgeAtCreate applies the requirements of n's scope, against the kept
// signatures first. A refusal by kept ones is checked once more against
// the registry's: a signature may have been pushed since they were kept.
func (s *Store) judgeAtCreate(ctx context.Context, live *Reloadable, p *policy, img Image, n admitName) error {
	reqs, scope := p.requirementsFor(n.id)
	usedKept := false
	err := judge(reqs, n.id, n.digest, s.createSignatures(ctx, live, img, n, &usedKept))
	var lookup *lookupError
	if err != nil && usedKept && !errors.As(err, &lookup) {
		if again := judge(reqs, n.id, n.digest, s.createSignatures(ctx, live, img, n, nil)); again == nil {
			return nil
		} else if errors.As(again, &lookup) {
			err = fmt.Errorf("%v (and %v)", err, again)
		} else {
			err = again
		}
	}
	if err == nil {
		return nil
	}
	return &PolicyError{Image: n.id.String(), File: p.file, Scope: scope, Reason: err.Error()}
}

// createSignatures gives n's signatures for a create: the kept look-ups
// when usedKept is not nil (and then sets it if one served), else, and for
// what was never looked up, the registry's, which are then kept.
func (s *Store) createSignatures(ctx context.Context, live *Reloadable, img Image, n admitName, usedKept *bool) signatureSource {
	look := func(source string) func() ([]cosignSignature, error) {
		return onceSignatures(func() ([]cosignSignature, error) {
			if usedKept != nil {
				if set, ok := findSignatureSet(img.Signatures, n.id.repo, n.digest, source); ok {
					sigs, err := s.keptSignatures(set)
					if err == nil {
						*usedKept = true
						return sigs, nil
					}
					s.log.WithError(err).WithField("image", n.id.String()).Warn("image store: a kept signature cannot be read; asking the registry")
				}
			}
			sigs, err := s.fetchSignaturesFor(ctx, live, img.ID, n.id.repo, n.digest, source)
			if err != nil {
				return nil, &lookupError{err: err}
			}
			return sigs, nil
		})
	}
	return signatureSource{tagged: look(sourceTag), referred: look(sourceReferrers)}
}

func noSignatures() signatureSource {
	none := func() ([]cosignSignature, error) { return nil, nil }
	return signatureSource{tagged: none, referred: none}
}
