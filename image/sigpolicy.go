package image

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// A signature policy in containers/image's containers-policy.json format,
// the one cri-o reads (signature_policy, and signature_policy_dir's
// <namespace>.json for the pods of one Kubernetes namespace):
//
//	{"default": [{"type": "reject"}],
//	 "transports": {"docker": {
//	   "registry.internal:5000/team": [{"type": "sigstoreSigned", "keyPath": "/etc/minicri/team.pub",
//	                                    "signedIdentity": {"type": "matchRepository"}}],
//	   "docker.io": [{"type": "insecureAcceptAnything"}]}}}
//
// Requirements: reject, insecureAcceptAnything, and sigstoreSigned with
// public keys (keyPath, keyPaths, keyData, keyDatas). A policy that asks
// for more (GPG signedBy, Fulcio, Rekor, PKI) is refused as a whole, so a
// pull is never let through by a requirement minicri cannot check. The
// file is read at every pull, as hosts.toml is; one that does not parse
// refuses the pull (fail closed). containers/image's own evaluator takes
// sigstore signatures only from its own transports (an internal type), not
// through minicri's hosts.toml, mirrors and limits; docs/images.md says more.

// ErrSignatureRefused: the signature policy refused the image, or could
// not be read (which refuses every pull it would have judged).
var ErrSignatureRefused = errors.New("refused by the signature policy")

// PolicyError is a refusal: the image, the policy file and the scope of it
// that applied, and why.
type PolicyError struct {
	Image, File, Scope, Reason string
}

func (e *PolicyError) Error() string {
	return fmt.Sprintf("image %s refused by signature policy %s (scope %s): %s", e.Image, e.File, e.Scope, e.Reason)
}

func (e *PolicyError) Unwrap() error { return ErrSignatureRefused }

// ValidNamespace reports whether ns is a Kubernetes namespace name (a
// DNS-1123 label: a-z, 0-9 and inner dashes, at most 63): the only names
// that may pick a file of signature_policy_dir.
func ValidNamespace(ns string) bool {
	if ns == "" || len(ns) > 63 || ns[0] == '-' || ns[len(ns)-1] == '-' {
		return false
	}
	for _, c := range []byte(ns) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// policyFileFor is the policy that judges a pull for namespace: the
// namespace's own file of dir when there is one, else file ("": none).
func policyFileFor(file, dir, namespace string) (string, error) {
	if dir == "" || namespace == "" {
		return file, nil
	}
	if !ValidNamespace(namespace) {
		return "", fmt.Errorf("%w: namespace %q is not a DNS-1123 label, so it names no file of signature_policy_dir", ErrInvalidReference, namespace)
	}
	own := filepath.Join(dir, namespace+".json")
	if _, err := os.Stat(own); err == nil {
		return own, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: %v", ErrSignatureRefused, err)
	}
	return file, nil
}

// policy is a parsed policy file.
type policy struct {
	file   string
	def    []requirement
	docker map[string][]requirement // transports.docker, by scope
}

type requirement struct {
	kind     string // "reject", "insecureAcceptAnything", "sigstoreSigned"
	keys     []crypto.PublicKey
	identity identityRule
	keyFiles []readKeyFile // what keyPath and keyPaths read
}

// readKeyFile is a key file as a policy read it: a cached policy holds while
// the file still has these contents (sigadmit.go).
type readKeyFile struct {
	path string
	sum  [sha256.Size]byte
}

// keyFiles lists the key files of every requirement of p.
func (p *policy) keyFiles() []readKeyFile {
	var out []readKeyFile
	for _, r := range p.def {
		out = append(out, r.keyFiles...)
	}
	for _, reqs := range p.docker {
		for _, r := range reqs {
			out = append(out, r.keyFiles...)
		}
	}
	return out
}

// identityRule is a sigstoreSigned requirement's signedIdentity.
type identityRule struct {
	kind             string // matchRepoDigestOrExact (the default), matchExact, matchRepository, exactReference, exactRepository, remapIdentity
	reference        identity
	prefix, signedTo string // remapIdentity
}

// The file's JSON; unknown keys are refused, as containers/image does.
type policyJSON struct {
	Default    []json.RawMessage                       `json:"default"`
	Transports map[string]map[string][]json.RawMessage `json:"transports"`
}

type requirementJSON struct {
	Type           string          `json:"type"`
	KeyPath        string          `json:"keyPath"`
	KeyPaths       []string        `json:"keyPaths"`
	KeyData        []byte          `json:"keyData"`
	KeyDatas       [][]byte        `json:"keyDatas"`
	SignedIdentity json.RawMessage `json:"signedIdentity"`
	// What minicri does not check; named so that the refusal says so.
	KeyType             json.RawMessage `json:"keyType"`
	Fulcio              json.RawMessage `json:"fulcio"`
	PKI                 json.RawMessage `json:"pki"`
	RekorPublicKeyPath  json.RawMessage `json:"rekorPublicKeyPath"`
	RekorPublicKeyPaths json.RawMessage `json:"rekorPublicKeyPaths"`
	RekorPublicKeyData  json.RawMessage `json:"rekorPublicKeyData"`
	RekorPublicKeyDatas json.RawMessage `json:"rekorPublicKeyDatas"`
}

type identityJSON struct {
	Type             string `json:"type"`
	DockerReference  string `json:"dockerReference"`
	DockerRepository string `json:"dockerRepository"`
	Prefix           string `json:"prefix"`
	SignedPrefix     string `json:"signedPrefix"`
}

// maxPolicySize bounds a policy file and a key file read into memory.
const maxPolicySize = 1 << 20

// loadPolicy reads and checks a policy file and the keys it names.
func loadPolicy(file string) (*policy, error) {
	data, err := readSmallFile(file)
	if err != nil {
		return nil, err
	}
	return parsePolicy(file, data)
}

// parsePolicy checks the contents of a policy file and reads the keys it names.
func parsePolicy(file string, data []byte) (*policy, error) {
	var pj policyJSON
	if err := strictJSON(data, &pj); err != nil {
		return nil, err
	}
	if len(pj.Default) == 0 {
		return nil, errors.New(`"default" is missing or empty (containers-policy.json asks for one)`)
	}
	p := &policy{file: file, docker: map[string][]requirement{}}
	var err error
	if p.def, err = parseRequirements(pj.Default, "default"); err != nil {
		return nil, err
	}
	// In order, so that a file with several faults is refused naming the
	// same one every time.
	for _, transport := range slices.Sorted(maps.Keys(pj.Transports)) {
		scopes := pj.Transports[transport]
		for _, scope := range slices.Sorted(maps.Keys(scopes)) {
			raw := scopes[scope]
			key := fmt.Sprintf("transports.%s.%q", transport, scope)
			if len(raw) == 0 {
				return nil, fmt.Errorf("%s: no requirements", key)
			}
			reqs, err := parseRequirements(raw, key)
			if err != nil {
				return nil, err
			}
			// Only images from registries are pulled: the other
			// transports (docker-daemon, oci-archive …) judge nothing here.
			if transport != "docker" {
				continue
			}
			canon, err := canonicalScope(scope)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", key, err)
			}
			if _, dup := p.docker[canon]; dup {
				return nil, fmt.Errorf("%s: another scope names %q too", key, canon)
			}
			p.docker[canon] = reqs
		}
	}
	return p, nil
}

func readSmallFile(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	if n, err := buf.ReadFrom(io.LimitReader(f, maxPolicySize+1)); err != nil {
		return nil, err
	} else if n > maxPolicySize {
		return nil, fmt.Errorf("%s is larger than %d bytes", file, maxPolicySize)
	}
	return buf.Bytes(), nil
}

func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON object")
	}
	return nil
}

func parseRequirements(raws []json.RawMessage, key string) ([]requirement, error) {
	out := make([]requirement, 0, len(raws))
	for i, raw := range raws {
		r, err := parseRequirement(raw)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", key, i, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func parseRequirement(raw json.RawMessage) (requirement, error) {
	var rj requirementJSON
	if err := strictJSON(raw, &rj); err != nil {
		return requirement{}, err
	}
	keyed := rj.KeyPath != "" || rj.KeyPaths != nil || rj.KeyData != nil || rj.KeyDatas != nil || rj.SignedIdentity != nil
	switch rj.Type {
	case "reject", "insecureAcceptAnything":
		if keyed || rj.KeyType != nil || rj.Fulcio != nil || rj.PKI != nil {
			return requirement{}, fmt.Errorf("%s takes no other keys", rj.Type)
		}
		return requirement{kind: rj.Type}, nil
	case "sigstoreSigned":
	case "signedBy", "signedBaseLayer":
		return requirement{}, fmt.Errorf("%s (GPG signatures) is not supported by minicri: use sigstoreSigned", rj.Type)
	case "":
		return requirement{}, errors.New(`"type" is missing`)
	default:
		return requirement{}, fmt.Errorf("unknown requirement type %q", rj.Type)
	}
	for k, v := range map[string]json.RawMessage{"fulcio": rj.Fulcio, "pki": rj.PKI, "rekorPublicKeyPath": rj.RekorPublicKeyPath,
		"rekorPublicKeyPaths": rj.RekorPublicKeyPaths, "rekorPublicKeyData": rj.RekorPublicKeyData, "rekorPublicKeyDatas": rj.RekorPublicKeyDatas, "keyType": rj.KeyType} {
		if v != nil {
			return requirement{}, fmt.Errorf("sigstoreSigned: %q is not supported by minicri (public keys only: keyPath, keyPaths, keyData, keyDatas)", k)
		}
	}
	sources := 0
	for _, set := range []bool{rj.KeyPath != "", rj.KeyPaths != nil, rj.KeyData != nil, rj.KeyDatas != nil} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		return requirement{}, errors.New("sigstoreSigned: want exactly one of keyPath, keyPaths, keyData, keyDatas")
	}
	paths, pems := rj.KeyPaths, rj.KeyDatas
	if rj.KeyPath != "" {
		paths = []string{rj.KeyPath}
	}
	if rj.KeyData != nil {
		pems = [][]byte{rj.KeyData}
	}
	r := requirement{kind: rj.Type, identity: identityRule{kind: "matchRepoDigestOrExact"}}
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			return requirement{}, fmt.Errorf("sigstoreSigned: key path %q is not absolute", p)
		}
		data, err := readSmallFile(p)
		if err != nil {
			return requirement{}, fmt.Errorf("sigstoreSigned: %w", err)
		}
		pems = append(pems, data)
		r.keyFiles = append(r.keyFiles, readKeyFile{path: p, sum: sha256.Sum256(data)})
	}
	if len(pems) == 0 {
		return requirement{}, errors.New("sigstoreSigned: no public key")
	}
	for i, data := range pems {
		key, err := parsePublicKey(data)
		if err != nil {
			return requirement{}, fmt.Errorf("sigstoreSigned: public key %d: %w", i+1, err)
		}
		r.keys = append(r.keys, key)
	}
	if rj.SignedIdentity != nil {
		var err error
		if r.identity, err = parseIdentityRule(rj.SignedIdentity); err != nil {
			return requirement{}, fmt.Errorf("sigstoreSigned: signedIdentity: %w", err)
		}
	}
	return r, nil
}

// parsePublicKey reads one PEM "PUBLIC KEY" (PKIX): ECDSA, Ed25519 or RSA,
// what cosign generate-key-pair and openssl make.
func parsePublicKey(data []byte) (crypto.PublicKey, error) {
	block, rest := pem.Decode(data)
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, errors.New(`want one PEM block of type "PUBLIC KEY"`)
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("data after the PEM block")
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	switch key.(type) {
	case *ecdsa.PublicKey, ed25519.PublicKey, *rsa.PublicKey:
		return key, nil
	}
	return nil, fmt.Errorf("key type %T is not ECDSA, Ed25519 or RSA", key)
}

func parseIdentityRule(raw json.RawMessage) (identityRule, error) {
	var ij identityJSON
	if err := strictJSON(raw, &ij); err != nil {
		return identityRule{}, err
	}
	rule := identityRule{kind: ij.Type}
	only := func(ok bool) error {
		if !ok {
			return fmt.Errorf("%s: unexpected keys", ij.Type)
		}
		return nil
	}
	var err error
	switch ij.Type {
	case "matchExact", "matchRepoDigestOrExact", "matchRepository":
		return rule, only(ij == identityJSON{Type: ij.Type})
	case "exactReference":
		if err := only(ij.DockerRepository == "" && ij.Prefix == "" && ij.SignedPrefix == ""); err != nil {
			return rule, err
		}
		if rule.reference, err = parseIdentity(ij.DockerReference); err != nil {
			return rule, fmt.Errorf("dockerReference: %w", err)
		}
		if rule.reference.tag == "" && rule.reference.digest == "" {
			return rule, fmt.Errorf("dockerReference %q names a repository, not a tag or digest", ij.DockerReference)
		}
		return rule, nil
	case "exactRepository":
		if err := only(ij.DockerReference == "" && ij.Prefix == "" && ij.SignedPrefix == ""); err != nil {
			return rule, err
		}
		if rule.reference, err = parseIdentity(ij.DockerRepository); err != nil {
			return rule, fmt.Errorf("dockerRepository: %w", err)
		}
		return rule, nil
	case "remapIdentity":
		if err := only(ij.DockerReference == "" && ij.DockerRepository == ""); err != nil {
			return rule, err
		}
		prefixes := []string{ij.Prefix, ij.SignedPrefix}
		for i, p := range prefixes {
			canon, err := canonicalScope(p)
			if err != nil || !validRemapPrefix(canon) {
				return rule, fmt.Errorf("prefix %q: want a host or a repository (host/path), with no tag or digest", p)
			}
			prefixes[i] = canon
		}
		rule.prefix, rule.signedTo = prefixes[0], prefixes[1]
		return rule, nil
	}
	return rule, fmt.Errorf("unknown signedIdentity type %q", ij.Type)
}

// validRemapPrefix: a repository name or a namespace of one ("host",
// "host/ns"), no tag or digest.
func validRemapPrefix(p string) bool {
	if p == "" || strings.ContainsAny(p, "@") {
		return false
	}
	if !strings.Contains(p, "/") {
		return hostPattern.MatchString(p)
	}
	id, err := parseIdentity(p)
	return err == nil && id.tag == "" && id.String() == p
}

// canonicalScope spells the registry host of a transports.docker scope
// (or a remapIdentity prefix) as references' hosts are spelled
// (canonicalHost), so that a scope written "Registry.Example:0443/team"
// judges the pulls of registry.example/team/…, and no spelling of a pulled
// reference's host escapes the scope of its registry. A scope whose first
// component names no host (it matches no reference) stays as written.
func canonicalScope(scope string) (string, error) {
	if domain, ok := strings.CutPrefix(scope, "*."); ok {
		return "*." + strings.ToLower(domain), nil
	}
	host, rest, hasPath := strings.Cut(scope, "/")
	if !hostPattern.MatchString(host) || !(strings.ContainsAny(host, ".:[") || strings.EqualFold(host, "localhost")) {
		return scope, nil
	}
	h, err := canonicalHost(host)
	if err != nil {
		return "", err
	}
	if hasPath {
		return h + "/" + rest, nil
	}
	return h, nil
}

// identity is a Docker reference normalised as containers/image does
// (docker.io/library/busybox), with its tag or digest if it has one: a
// signature's docker-reference, the image pulled, a policy's reference.
type identity struct {
	repo, tag, digest string
}

func (i identity) String() string {
	s := i.repo
	if i.tag != "" {
		s += ":" + i.tag
	}
	if i.digest != "" {
		s += "@" + i.digest
	}
	return s
}

// parseIdentity normalises a reference and keeps "no tag" as it is: a
// signature that names only a repository is not one for :latest.
func parseIdentity(s string) (identity, error) {
	if s == "" || strings.TrimSpace(s) != s {
		return identity{}, fmt.Errorf("%w: %q", ErrInvalidReference, s)
	}
	if err := checkGrammar(s); err != nil {
		return identity{}, err
	}
	s, err := canonicalRef(s)
	if err != nil {
		return identity{}, err
	}
	rest, digest, _ := strings.Cut(s, "@")
	var tag string
	if i := strings.LastIndexByte(rest, ':'); i > strings.LastIndexByte(rest, '/') {
		rest, tag = rest[:i], rest[i+1:]
	}
	r, err := name.NewRepository(rest, name.WeakValidation)
	if err != nil {
		return identity{}, fmt.Errorf("%w: %q: %v", ErrInvalidReference, s, err)
	}
	return identity{repo: displayHost(r.RegistryStr()) + "/" + r.RepositoryStr(), tag: tag, digest: digest}, nil
}

// requirementsFor finds the requirements of the most specific scope of
// transports.docker that names the image (the reference itself, its
// repository, each namespace above it, its host, *.domain wildcards),
// else transports.docker."", else default; and the scope's name.
func (p *policy) requirementsFor(img identity) ([]requirement, string) {
	for _, scope := range policyScopes(img) {
		if reqs, ok := p.docker[scope]; ok {
			return reqs, fmt.Sprintf("transports.docker.%q", scope)
		}
	}
	if reqs, ok := p.docker[""]; ok {
		return reqs, `transports.docker.""`
	}
	return p.def, "default"
}

// policyScopes lists the scopes that can name img, most specific first,
// in containers/image's order for the docker transport.
func policyScopes(img identity) []string {
	scopes := []string{img.String()}
	n := img.repo
	scopes = append(scopes, n)
	for {
		i := strings.LastIndexByte(n, '/')
		if i < 0 {
			break
		}
		n = n[:i]
		scopes = append(scopes, n)
	}
	if i := strings.IndexByte(n, ':'); i >= 0 {
		n = n[:i] // the port: *.example.com matches example.com:5000 too
	}
	for {
		i := strings.IndexByte(n, '.')
		if i < 0 {
			break
		}
		n = n[i+1:]
		scopes = append(scopes, "*."+n)
	}
	return scopes
}

// sigstorePayloadType is the type in the critical section of every cosign
// (and containers/image sigstore) signature payload.
const sigstorePayloadType = "cosign container image signature"

// signedPayload is the "simple signing" payload a cosign signature signs.
type signedPayload struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional json.RawMessage `json:"optional"`
}

// cosignSignature is one signature found for an image: the payload and
// the base64 signature of its annotation, and where it was found.
type cosignSignature struct {
	payload   []byte
	signature string // "": the layer had no signature annotation
	where     string // "tag sha256-….sig", "referrer sha256:…"
}

// signatureSource gives an image's signatures in two stages, each fetched
// once and only when asked: those of cosign's .sig tag, where nearly all
// are, and those of its referrers, looked up only when the first do not
// satisfy a requirement (a round trip or two to the registry less for
// every signed pull).
type signatureSource struct {
	tagged, referred func() ([]cosignSignature, error)
}

// judge applies the requirements of the scope to an image whose manifest
// has digest; signatures are fetched only when a requirement asks.
// It answers nil (allowed) or the reason for the refusal.
func judge(reqs []requirement, img identity, digest string, signatures signatureSource) error {
	if len(reqs) == 0 {
		return errors.New("the scope has no requirements")
	}
	for _, r := range reqs {
		switch r.kind {
		case "insecureAcceptAnything":
		case "reject":
			return errors.New("the policy rejects every image of this scope")
		case "sigstoreSigned":
			sigs, err := signatures.tagged()
			if err != nil {
				return err
			}
			refused := r.acceptsOneOf(sigs, img, digest)
			if refused == nil {
				continue
			}
			more, err := signatures.referred()
			if err != nil {
				return err
			}
			if len(more) == 0 {
				return refused
			}
			if err := r.acceptsOneOf(append(sigs[:len(sigs):len(sigs)], more...), img, digest); err != nil {
				return err
			}
		default:
			return fmt.Errorf("requirement %q cannot be checked", r.kind)
		}
	}
	return nil
}

// maxReasons bounds the rejections a refusal lists.
const maxReasons = 4

func (r requirement) acceptsOneOf(sigs []cosignSignature, img identity, digest string) error {
	if len(sigs) == 0 {
		return errors.New("a signature was required, but no signature exists")
	}
	var reasons []string
	for _, s := range sigs {
		err := r.accepts(s, img, digest)
		if err == nil {
			return nil
		}
		if len(reasons) < maxReasons {
			reasons = append(reasons, fmt.Sprintf("%s: %v", s.where, err))
		}
	}
	if len(sigs) == 1 {
		return errors.New(reasons[0])
	}
	more := ""
	if len(sigs) > len(reasons) {
		more = fmt.Sprintf("; and %d more", len(sigs)-len(reasons))
	}
	return fmt.Errorf("none of the %d signatures was accepted: %s%s", len(sigs), strings.Join(reasons, "; "), more)
}

// accepts checks one signature: made by one of the keys over its payload,
// a payload of the cosign type naming this manifest's digest and an
// identity the rule accepts for img. Cryptography first: nothing of an
// unverified payload is believed.
func (r requirement) accepts(s cosignSignature, img identity, digest string) error {
	if s.signature == "" {
		return errors.New("no dev.cosignproject.cosign/signature annotation")
	}
	sig, err := base64.StdEncoding.DecodeString(s.signature)
	if err != nil {
		return fmt.Errorf("signature annotation is not base64: %v", err)
	}
	if !r.verifiedByAKey(s.payload, sig) {
		return errors.New("not signed by a key of the policy")
	}
	var p signedPayload
	if err := strictJSON(s.payload, &p); err != nil {
		return fmt.Errorf("signed payload: %v", err)
	}
	if p.Critical.Type != sigstorePayloadType {
		return fmt.Errorf("signed payload of type %q, not %q", p.Critical.Type, sigstorePayloadType)
	}
	if got := p.Critical.Image.DockerManifestDigest; got != digest {
		return fmt.Errorf("signed for manifest %s, not this image's %s", got, digest)
	}
	signed := p.Critical.Identity.DockerReference
	if !r.identity.matches(img, signed) {
		return fmt.Errorf("signed for %q, which %s does not accept for %s", signed, r.identity.kind, img)
	}
	return nil
}

// verifiedByAKey: SHA-256 for every key type, as containers/image (and
// cosign for the P-256 keys it makes) hashes; Ed25519 signs the payload.
func (r requirement) verifiedByAKey(payload, sig []byte) bool {
	sum := sha256.Sum256(payload)
	for _, k := range r.keys {
		switch k := k.(type) {
		case *ecdsa.PublicKey:
			if ecdsa.VerifyASN1(k, sum[:], sig) {
				return true
			}
		case ed25519.PublicKey:
			if ed25519.Verify(k, payload, sig) {
				return true
			}
		case *rsa.PublicKey:
			if rsa.VerifyPKCS1v15(k, crypto.SHA256, sum[:], sig) == nil {
				return true
			}
		}
	}
	return false
}

// matches is containers/image's signedIdentity check of a verified
// signature's docker-reference against the image pulled.
func (m identityRule) matches(img identity, signedRef string) bool {
	signed, err := parseIdentity(signedRef)
	if err != nil {
		return false
	}
	nameOnly := func(i identity) bool { return i.tag == "" && i.digest == "" }
	switch m.kind {
	case "matchExact":
		return !nameOnly(img) && !nameOnly(signed) && signed.String() == img.String()
	case "matchRepoDigestOrExact":
		return repoDigestOrExact(img, signed)
	case "matchRepository":
		return signed.repo == img.repo
	case "exactReference":
		return !nameOnly(signed) && signed.String() == m.reference.String()
	case "exactRepository":
		return signed.repo == m.reference.repo
	case "remapIdentity":
		remapped, ok := m.remap(img)
		return ok && repoDigestOrExact(remapped, signed)
	}
	return false
}

// repoDigestOrExact: an image pulled by tag needs a signature for that
// tag; one pulled by digest alone, a signature for any tag of its
// repository (the digest itself is checked against the payload's); one
// pulled by tag and digest, a signature naming both.
func repoDigestOrExact(img, signed identity) bool {
	if signed.tag == "" && signed.digest == "" {
		return false
	}
	if img.digest != "" && img.tag == "" {
		return signed.repo == img.repo
	}
	return signed.String() == img.String()
}

// prefixMatches: the rule's prefix is img's repository or a namespace
// above it, compared whole ("r.io/team" names "r.io/team/app", never
// "r.io/teams/app"; a host's port is part of it).
func (m identityRule) prefixMatches(img identity) bool {
	return img.repo == m.prefix || strings.HasPrefix(img.repo, m.prefix+"/")
}

// remap replaces the rule's prefix of img's repository by signedPrefix. A
// result that is not a reference in its full form (a host that would read
// as a repository of docker.io, a tag where a port would be) is not a
// reference: false, as containers/image refuses it.
func (m identityRule) remap(img identity) (identity, bool) {
	if !m.prefixMatches(img) {
		return img, true
	}
	img.repo = m.signedTo + strings.TrimPrefix(img.repo, m.prefix)
	again, err := parseIdentity(img.String())
	return img, err == nil && again == img
}
