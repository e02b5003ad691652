package testimage

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Signatures as cosign makes them, with keys the test makes:
//
//	key := testimage.NewSigningKey(t)
//	sig := key.Sign(t, reg.Host()+"/app", digest)  // cosign's payload
//	testimage.PushSignatures(t, reg.Host()+"/app", digest, sig)

// CosignPayloadType is the media type of a cosign signature layer.
const CosignPayloadType = types.MediaType("application/vnd.dev.cosign.simplesigning.v1+json")

// CosignSignatureAnnotation holds the base64 signature of the payload.
const CosignSignatureAnnotation = "dev.cosignproject.cosign/signature"

// SigningKey is an ECDSA P-256 key pair, as cosign generate-key-pair makes.
type SigningKey struct {
	priv *ecdsa.PrivateKey
	// PublicPEM is the public key, PEM "PUBLIC KEY": what a policy's keyPath names.
	PublicPEM []byte
}

func NewSigningKey(t testing.TB) *SigningKey {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return &SigningKey{priv: priv, PublicPEM: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})}
}

// Signature is one cosign signature: a payload and its signature.
type Signature struct {
	Payload   []byte
	Signature string // base64
}

// Payload is cosign's simple-signing payload naming identity (cosign
// writes the repository, "host/repo") and the manifest digest.
func Payload(identity, digest string) []byte {
	var p struct {
		Critical struct {
			Identity struct {
				DockerReference string `json:"docker-reference"`
			} `json:"identity"`
			Image struct {
				DockerManifestDigest string `json:"docker-manifest-digest"`
			} `json:"image"`
			Type string `json:"type"`
		} `json:"critical"`
		Optional map[string]string `json:"optional"`
	}
	p.Critical.Identity.DockerReference = identity
	p.Critical.Image.DockerManifestDigest = digest
	p.Critical.Type = "cosign container image signature"
	out, _ := json.Marshal(p)
	return out
}

// Sign signs cosign's payload for identity and digest.
func (k *SigningKey) Sign(t testing.TB, identity, digest string) Signature {
	t.Helper()
	return k.SignPayload(t, Payload(identity, digest))
}

// SignPayload signs any payload (ECDSA over its SHA-256, as cosign).
func (k *SigningKey) SignPayload(t testing.TB, payload []byte) Signature {
	t.Helper()
	sum := sha256.Sum256(payload)
	sig, err := ecdsa.SignASN1(rand.Reader, k.priv, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return Signature{Payload: payload, Signature: base64.StdEncoding.EncodeToString(sig)}
}

// SignatureImage is cosign's signature manifest: one layer per signature.
func SignatureImage(t testing.TB, sigs ...Signature) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, s := range sigs {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:       static.NewLayer(s.Payload, CosignPayloadType),
			Annotations: map[string]string{CosignSignatureAnnotation: s.Signature},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return img
}

// SignatureTag is where cosign stores the signatures of digest: the tag
// sha256-<hex>.sig of the image's repository.
func SignatureTag(digest string) string {
	return strings.Replace(digest, ":", "-", 1) + ".sig"
}

// PushSignatures pushes sigs of the manifest digest to repo's signature
// tag ("127.0.0.1:PORT/app"), as cosign sign does.
func PushSignatures(t testing.TB, repo, digest string, sigs []Signature, opts ...remote.Option) {
	t.Helper()
	Push(t, SignatureImage(t, sigs...), repo+":"+SignatureTag(digest), opts...)
}
