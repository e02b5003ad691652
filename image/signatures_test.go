package image

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/minicri/minicri/test/registry"
	tim "github.com/minicri/minicri/test/testimage"
)

// signedRegistry serves, through a proxy that counts blob downloads,
// repository app with three images: signed by key, unsigned, signed by
// another key.
type signedRegistry struct {
	px                      *proxy
	repo                    string // "127.0.0.1:PORT/app" (the proxy's host)
	signed, unsigned, other pushed
	key                     *tim.SigningKey
}

func startSignedRegistry(t *testing.T) *signedRegistry {
	t.Helper()
	reg := registry.Start(t, registry.Options{})
	r := &signedRegistry{px: startProxy(t, reg.Host()), key: tim.NewSigningKey(t)}
	r.repo = r.px.host() + "/app"
	r.signed = push(t, reg, "app:signed", tim.Busybox(t, tim.WithEnv("IMAGE=signed")))
	r.unsigned = push(t, reg, "app:unsigned", tim.Busybox(t, tim.WithEnv("IMAGE=unsigned")))
	r.other = push(t, reg, "app:other", tim.Busybox(t, tim.WithEnv("IMAGE=other")))
	// cosign's identity: the repository as the puller names it.
	tim.PushSignatures(t, reg.Host()+"/app", r.signed.digest, []tim.Signature{r.key.Sign(t, r.repo, r.signed.digest)})
	tim.PushSignatures(t, reg.Host()+"/app", r.other.digest, []tim.Signature{tim.NewSigningKey(t).Sign(t, r.repo, r.other.digest)})
	return r
}

// imageBlobGets counts the downloads of an image's config and layers.
func (r *signedRegistry) imageBlobGets(t *testing.T, p pushed) int {
	gets := r.px.gets()
	n := gets[p.configID]
	for _, d := range layerDigests(t, p.img) {
		n += gets[d]
	}
	return n
}

func (r *signedRegistry) policy(t *testing.T, dir string) string {
	return writePolicy(t, dir, "policy.json", fmt.Sprintf(`{"default": [{"type": "reject"}],
		"transports": {"docker": {%q: [{"type": "sigstoreSigned", "keyPath": %q, "signedIdentity": {"type": "matchRepository"}}]}}}`,
		r.repo, keyFile(t, r.key)))
}

// TestPullBySignaturePolicy: the signed image pulls; the unsigned one and
// one signed by another key are refused naming the scope and the reason,
// before a blob of theirs is downloaded, leaving nothing in the store.
func TestPullBySignaturePolicy(t *testing.T) {
	r := startSignedRegistry(t)
	s := newTestStore(t, Options{SignaturePolicy: r.policy(t, t.TempDir())})
	ctx := testContext(t)

	for _, tc := range []struct {
		name, tag, reason string
		p                 pushed
	}{
		{"unsigned", "unsigned", "a signature was required, but no signature exists", r.unsigned},
		{"another key", "other", "not signed by a key of the policy", r.other},
	} {
		_, err := s.Pull(ctx, r.repo+":"+tc.tag, nil)
		var perr *PolicyError
		if !errors.As(err, &perr) || !errors.Is(err, ErrSignatureRefused) {
			t.Fatalf("%s: pull = %v, want a *PolicyError", tc.name, err)
		}
		if perr.Scope != fmt.Sprintf("transports.docker.%q", r.repo) || !strings.Contains(perr.Reason, tc.reason) || perr.Image != r.repo+":"+tc.tag {
			t.Fatalf("%s: refusal %+v; want image %s, scope of %s, reason %q", tc.name, perr, r.repo+":"+tc.tag, r.repo, tc.reason)
		}
		if n := r.imageBlobGets(t, tc.p); n != 0 {
			t.Fatalf("%s: %d blobs of the refused image downloaded", tc.name, n)
		}
		assertNoImage(t, s)
		if blobs := dirNames(t, s.path(blobsDir)); len(blobs) != 0 {
			t.Fatalf("%s: blobs kept after a refusal: %v", tc.name, blobs)
		}
		if layers := dirNames(t, s.path(layersDir)); len(layers) != 0 {
			t.Fatalf("%s: layers kept after a refusal: %v", tc.name, layers)
		}
	}
	img, err := s.Pull(ctx, r.repo+":signed", nil)
	if err != nil || img.ID != r.signed.configID {
		t.Fatalf("pull of the signed image = %s, %v; want %s", img.ID, err, r.signed.configID)
	}
	// By digest too: the signature names the manifest, not the tag.
	if _, err := s.Pull(ctx, r.repo+"@"+r.signed.digest, nil); err != nil {
		t.Fatalf("pull of the signed image by digest: %v", err)
	}
}

// TestPullSignedImageWithChangedLayer: a signature covers the manifest;
// a layer that differs from what the manifest names is refused by the
// digest check, as for any image.
func TestPullSignedImageWithChangedLayer(t *testing.T) {
	r := startSignedRegistry(t)
	s := newTestStore(t, Options{SignaturePolicy: r.policy(t, t.TempDir())})
	layer := layerDigests(t, r.signed.img)[0]
	r.px.setTamper(func(digest string, body io.ReadCloser) io.ReadCloser {
		if digest != layer {
			return body
		}
		return &flipReader{ReadCloser: body, at: 1000}
	})
	if _, err := s.Pull(testContext(t), r.repo+":signed", nil); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("pull of a signed image with a changed layer = %v, want ErrDigestMismatch", err)
	}
	assertNoImage(t, s)
}

// TestSignaturePolicyReadAtEveryPull: an edit takes effect at the next
// pull; a policy that does not parse refuses, naming its file; a
// namespace's own file replaces the node's for that namespace only.
func TestSignaturePolicyReadAtEveryPull(t *testing.T) {
	r := startSignedRegistry(t)
	dir := t.TempDir()
	nsDir := t.TempDir()
	file := writePolicy(t, dir, "policy.json", `{"default": [{"type": "insecureAcceptAnything"}]}`)
	s := newTestStore(t, Options{SignaturePolicy: file, SignaturePolicyDir: nsDir})
	ctx := testContext(t)
	unsigned := r.repo + ":unsigned"
	if _, err := s.Pull(ctx, unsigned, nil); err != nil {
		t.Fatalf("pull under insecureAcceptAnything: %v", err)
	}
	writePolicy(t, dir, "policy.json", `{"default": [{"type": "reject"}]}`)
	if _, err := s.Pull(ctx, unsigned, nil); !errors.Is(err, ErrSignatureRefused) || !strings.Contains(err.Error(), "scope default") {
		t.Fatalf("pull after the edit to reject: %v, want refused by scope default", err)
	}
	writePolicy(t, dir, "policy.json", `{"default": [{"type": "insecureAccept`)
	if _, err := s.Pull(ctx, unsigned, nil); !errors.Is(err, ErrSignatureRefused) || !strings.Contains(err.Error(), file) {
		t.Fatalf("pull under a broken policy: %v, want refused naming %s", err, file)
	}
	writePolicy(t, dir, "policy.json", `{"default": [{"type": "reject"}]}`)
	writePolicy(t, nsDir, "team-a.json", `{"default": [{"type": "insecureAcceptAnything"}]}`)
	if _, err := s.PullForNamespace(ctx, unsigned, nil, "team-a"); err != nil {
		t.Fatalf("pull for team-a, whose policy accepts anything: %v", err)
	}
	if _, err := s.PullForNamespace(ctx, unsigned, nil, "team-b"); !errors.Is(err, ErrSignatureRefused) {
		t.Fatalf("pull for team-b (the node's policy): %v, want refused", err)
	}
	if _, err := s.PullForNamespace(ctx, unsigned, nil, "../"+strings.TrimPrefix(dir, "/")); !errors.Is(err, ErrInvalidReference) {
		t.Fatalf("pull for a namespace that walks up: %v, want ErrInvalidReference", err)
	}
}

// TestSignatureCaps: a registry that serves a huge signature manifest, or
// thousands of signatures, is cut off by the caps: the pull is refused
// before a payload or a blob is asked for.
func TestSignatureCaps(t *testing.T) {
	imageManifest := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:` + strings.Repeat("c", 64) + `","size":2},"layers":[]}`)
	sum := sha256.Sum256(imageManifest)
	sigTag := fmt.Sprintf("sha256-%x.sig", sum)
	many := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Config: v1.Descriptor{MediaType: types.OCIConfigJSON, Digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("e", 64)}, Size: 2}}
	for i := 0; i < 1000; i++ {
		many.Layers = append(many.Layers, v1.Descriptor{MediaType: cosignPayloadType, Size: 200,
			Digest: v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%064x", i)}, Annotations: map[string]string{cosignSignatureKey: "MEUC"}})
	}
	manyRaw, err := json.Marshal(many)
	if err != nil || len(manyRaw) > maxSignatureManifestSize {
		t.Fatalf("%d bytes, %v: the test's manifest must fit the size cap to reach the count cap", len(manyRaw), err)
	}
	bigPayload := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Config: many.Config,
		Layers: []v1.Descriptor{{MediaType: cosignPayloadType, Size: 1 << 30, Digest: many.Config.Digest, Annotations: map[string]string{cosignSignatureKey: "MEUC"}}}}
	bigRaw, err := json.Marshal(bigPayload)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		serveSig   func(w http.ResponseWriter, out io.Writer)
	}{
		{"huge payload", fmt.Sprintf("more than the %d allowed", maxSignaturePayloadSize), func(w http.ResponseWriter, out io.Writer) {
			w.Header().Set("Content-Type", string(types.OCIManifestSchema1))
			_, _ = out.Write(bigRaw)
		}},
		{"huge manifest", "allowed", func(w http.ResponseWriter, out io.Writer) {
			w.Header().Set("Content-Type", string(types.OCIManifestSchema1))
			registry.WriteHugeManifest(out, 1<<30)
		}},
		{"thousands of signatures", fmt.Sprintf("more than %d signatures", maxSignatures), func(w http.ResponseWriter, out io.Writer) {
			w.Header().Set("Content-Type", string(types.OCIManifestSchema1))
			_, _ = out.Write(manyRaw)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := registry.ServeManifests(t, func(w http.ResponseWriter, r *http.Request, out io.Writer) {
				if strings.HasSuffix(r.URL.Path, "/"+sigTag) {
					tc.serveSig(w, out)
					return
				}
				w.Header().Set("Content-Type", string(types.OCIManifestSchema1))
				_, _ = out.Write(imageManifest)
			})
			key := keyFile(t, tim.NewSigningKey(t))
			policy := writePolicy(t, t.TempDir(), "p.json", fmt.Sprintf(`{"default": [{"type": "sigstoreSigned", "keyPath": %q}]}`, key))
			s := newTestStore(t, Options{SignaturePolicy: policy})
			_, err := s.Pull(testContext(t), srv.Ref("v1"), nil)
			if !errors.Is(err, ErrSignatureRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("pull = %v, want a refusal containing %q", err, tc.want)
			}
			// The socket buffers hold a few MiB more than the client read.
			if sent := srv.Sent.Load(); sent > maxSignatureManifestSize+16<<20 {
				t.Fatalf("the registry got %d KiB out to the client; the cap is %d KiB", sent>>10, maxSignatureManifestSize>>10)
			}
			assertNoImage(t, s)
		})
	}
}

// TestSignaturesFromReferrers: a registry with the OCI 1.1 referrers API
// serves cosign's signature as a referrer of the image's manifest, with no
// .sig tag.
func TestSignaturesFromReferrers(t *testing.T) {
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.WithReferrersSupport(true), ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	key := tim.NewSigningKey(t)
	img := tim.Busybox(t, tim.WithEnv("IMAGE=referred"))
	digest := tim.Push(t, img, host+"/app:v1")
	desc := v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: mustHash(t, digest), Size: manifestSize(t, img)}
	sigImg := mutate.ConfigMediaType(tim.SignatureImage(t, key.Sign(t, host+"/app", digest)), cosignReferrerArtifact)
	sigImg = mutate.Subject(sigImg, desc).(v1.Image)
	sigDigest, err := sigImg.Digest()
	if err != nil {
		t.Fatal(err)
	}
	tim.Push(t, sigImg, host+"/app@"+sigDigest.String())

	policy := writePolicy(t, t.TempDir(), "p.json", fmt.Sprintf(`{"default": [{"type": "sigstoreSigned", "keyPath": %q, "signedIdentity": {"type": "matchRepository"}}]}`, keyFile(t, key)))
	s := newTestStore(t, Options{SignaturePolicy: policy})
	if _, err := s.Pull(testContext(t), host+"/app:v1", nil); err != nil {
		t.Fatalf("pull of an image signed through a referrer: %v", err)
	}
}

func manifestSize(t *testing.T, img v1.Image) int64 {
	raw, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(raw))
}

// sigstorePolicyFor requires key's signature for repo (matchRepository).
func sigstorePolicyFor(t *testing.T, repo string, key *tim.SigningKey) string {
	return writePolicy(t, t.TempDir(), "policy.json", fmt.Sprintf(`{"default": [{"type": "reject"}],
		"transports": {"docker": {%q: [{"type": "sigstoreSigned", "keyPath": %q, "signedIdentity": {"type": "matchRepository"}}]}}}`,
		repo, keyFile(t, key)))
}

// TestSignaturesThroughMirror: signatures are asked of the mirrors first,
// as the image is, and of the registry after a mirror that lacks them.
func TestSignaturesThroughMirror(t *testing.T) {
	upstream := registry.Start(t, registry.Options{})
	mirror := registry.Start(t, registry.Options{})
	key := tim.NewSigningKey(t)
	img := tim.Busybox(t, tim.WithEnv("IMAGE=mirrored"))
	repo := upstream.Host() + "/app"
	digest := tim.Push(t, img, repo+":v1")
	tim.Push(t, img, mirror.Host()+"/app:v1")
	sig := []tim.Signature{key.Sign(t, repo, digest)} // cosign names the repository the puller asks for
	s := newTestStore(t, Options{
		Registries:      map[string]RegistryConfig{upstream.Host(): {Mirrors: []string{"http://" + mirror.Host()}}},
		SignaturePolicy: sigstorePolicyFor(t, repo, key),
	})

	// Only the registry has the signature: the mirror's 404 sends the
	// lookup on to it.
	tim.PushSignatures(t, repo, digest, sig)
	if _, err := s.Pull(testContext(t), repo+":v1", nil); err != nil {
		t.Fatalf("pull with the signature on the registry only: %v", err)
	}
	if err := s.Remove(repo + ":v1"); err != nil {
		t.Fatal(err)
	}
	// The registry down: the mirror serves image and signature.
	tim.PushSignatures(t, mirror.Host()+"/app", digest, sig)
	upstream.Stop()
	if _, err := s.Pull(testContext(t), repo+":v1", nil); err != nil {
		t.Fatalf("pull from the mirror with the registry down: %v", err)
	}
}

// TestSignaturesWithCredentials: the signature lookups carry the pull's
// credentials to the registry, as its manifest and blobs do.
func TestSignaturesWithCredentials(t *testing.T) {
	reg := registry.Start(t, registry.Options{Users: map[string]string{"alice": "s3cret"}})
	key := tim.NewSigningKey(t)
	repo := reg.Host() + "/private"
	digest := tim.Push(t, tim.Busybox(t), repo+":1", remoteAuth("alice", "s3cret"))
	tim.PushSignatures(t, repo, digest, []tim.Signature{key.Sign(t, repo, digest)}, remoteAuth("alice", "s3cret"))
	s := newTestStore(t, Options{SignaturePolicy: sigstorePolicyFor(t, repo, key)})
	if _, err := s.Pull(testContext(t), repo+":1", &Auth{Username: "alice", Password: "s3cret"}); err != nil {
		t.Fatalf("pull of a signed image from a registry with auth: %v", err)
	}
}

// TestSignatureOfAManifestList: a manifest list is judged by the list's
// digest, which is what cosign signs; a signature of the platform's
// manifest alone does not count for it.
func TestSignatureOfAManifestList(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	key := tim.NewSigningKey(t)
	repo := reg.Host() + "/multi"
	img := tim.Busybox(t, tim.WithEnv("IMAGE=listed"))
	idx := tim.Index(t, map[string]v1.Image{"linux/" + runtimeArch(): img})
	listDigest := tim.PushIndex(t, idx, repo+":list")
	platformDigest := tim.Digest(t, img)
	s := newTestStore(t, Options{SignaturePolicy: sigstorePolicyFor(t, repo, key)})

	tim.PushSignatures(t, repo, platformDigest, []tim.Signature{key.Sign(t, repo, platformDigest)})
	if _, err := s.Pull(testContext(t), repo+":list", nil); !errors.Is(err, ErrSignatureRefused) {
		t.Fatalf("pull of a list whose platform manifest alone is signed: %v, want refused", err)
	}
	assertNoImage(t, s)
	tim.PushSignatures(t, repo, listDigest, []tim.Signature{key.Sign(t, repo, listDigest)})
	if _, err := s.Pull(testContext(t), repo+":list", nil); err != nil {
		t.Fatalf("pull of a signed list: %v", err)
	}
}
